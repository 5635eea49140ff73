package firmware

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConstraint(t *testing.T) {
	for _, tt := range []struct {
		constraint, version string
		want                bool
	}{
		{"22.39.1002", "22.39.1002", true},
		{"22.39.1002", "22.39.1003", false},
		{"=22.39.1002", "22.39.1002", true},
		{">=22.39.1002", "22.39.1002", true},
		{">=22.39.1002", "22.40.1000", true},
		{">=22.39.1002", "22.39.999", false}, // numeric, not text: 999 < 1002
		{">=22.39.1002", "22.4.5000", false}, // 4 < 39
		{">=22.39.1002", "22.100.0", true},   // 100 > 39 although "1" < "3"
		{">= 22.39", "22.39.0", true},
		{"22.39", "22.39.0", true},
		{">22.39.1002", "22.39.1002", false},
		{"<=16.35.2000", "16.35.2000 (MT_0000000008)", true},
		{"<16.35.2000", "16.34.9999", true},
	} {
		c, err := Parse(tt.constraint)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.constraint, err)
		}
		v, err := ParseVersion(tt.version)
		if err != nil {
			t.Fatalf("ParseVersion(%q): %v", tt.version, err)
		}
		if got := c.Allows(v); got != tt.want {
			t.Errorf("%q allows %q = %v, want %v", tt.constraint, tt.version, got, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"", ">=", "22.x.1", "latest", "22..1", "~22.39", "22.-1.0", ">=>22.1"} {
		if _, err := Parse(s); err == nil || !strings.Contains(err.Error(), `such as "22.39.1002"`) {
			t.Errorf("Parse(%q) = %v, want an error with an example", s, err)
		}
	}
}

func TestRead(t *testing.T) {
	root := t.TempDir()
	dev := filepath.Join(root, "sys", "class", "infiniband")
	for name, v := range map[string]string{"mlx5_0": "22.39.1002\n", "rxe0": ""} {
		if err := os.MkdirAll(filepath.Join(dev, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if name != "rxe0" {
			if err := os.WriteFile(filepath.Join(dev, name, "fw_ver"), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v, err := Read(root, "mlx5_0"); err != nil || v != "22.39.1002" {
		t.Errorf("Read(mlx5_0) = %q, %v", v, err)
	}
	if _, err := Read(root, "rxe0"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Read(rxe0) = %v, want ErrUnknown", err)
	}
	if _, err := Read(root, "gone0"); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrUnknown) {
		t.Errorf("Read(gone0) = %v, want not-exist", err)
	}
}
