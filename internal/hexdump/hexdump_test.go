package hexdump

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse("# nlmsghdr\n1c 00 00 00  # len 28\n\n10 00 # type\n  05 00 # flags\n")
	if err != nil || !bytes.Equal(got, []byte{0x1c, 0, 0, 0, 0x10, 0, 5, 0}) {
		t.Errorf("Parse = % x, %v", got, err)
	}
	if _, err := Parse("1c 0"); err == nil {
		t.Error("an odd number of digits parsed")
	}
	if _, err := Parse("zz"); err == nil {
		t.Error("a non-hex digit parsed")
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dump.hex")
	if err := os.WriteFile(path, []byte("0a0b # two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err != nil || !bytes.Equal(got, []byte{10, 11}) {
		t.Errorf("ReadFile = % x, %v", got, err)
	}
	if err := os.WriteFile(path, []byte("0g"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err == nil || !bytes.Contains([]byte(err.Error()), []byte("dump.hex")) {
		t.Errorf("ReadFile of a bad dump: %v; want an error naming the file", err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.hex")); err == nil {
		t.Error("ReadFile of a missing file succeeded")
	}
}
