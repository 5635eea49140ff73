package ecn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Fixture builds a sysfs tree below a temporary root with the ecn files of
// netdev, np and rp enabled on the given priorities, the netdev's class
// entry a symlink into sys/devices as on a real system. It is a fake: real
// mlx5 sysfs validates writes; only a ConnectX NIC proves the layout.
func fixture(t *testing.T, netdev string, np, rp []int) string {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "sys", "devices", "pci0000:00", "0000:00:02.0", "net", netdev)
	for _, pt := range []struct {
		name string
		on   []int
	}{{NP, np}, {RP, rp}} {
		dir := filepath.Join(dev, "ecn", pt.name, "enable")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for p := 0; p < Priorities; p++ {
			v := "0\n"
			if slices.Contains(pt.on, p) {
				v = "1\n"
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(p)), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	class := filepath.Join(root, "sys", "class", "net")
	if err := os.MkdirAll(class, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "devices", "pci0000:00", "0000:00:02.0", "net", netdev), filepath.Join(class, netdev)); err != nil {
		t.Fatal(err)
	}
	return root
}

func enableFile(root, netdev, point string, p int) string {
	return filepath.Join(root, "sys", "class", "net", netdev, "ecn", point, "enable", fmt.Sprint(p))
}

func mtimes(t *testing.T, root, netdev string) map[string]time.Time {
	t.Helper()
	m := map[string]time.Time{}
	for _, pt := range []string{NP, RP} {
		for p := 0; p < Priorities; p++ {
			fi, err := os.Stat(enableFile(root, netdev, pt, p))
			if err != nil {
				t.Fatal(err)
			}
			m[fmt.Sprintf("%s/enable/%d", pt, p)] = fi.ModTime()
		}
	}
	return m
}

func TestObserve(t *testing.T) {
	root := fixture(t, "ens1f0np0", []int{3}, []int{3, 5})
	got, err := New(Options{Root: root}).Observe("ens1f0np0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.NP, []int{3}) || !slices.Equal(got.RP, []int{3, 5}) {
		t.Errorf("Observe = %+v, want np [3], rp [3 5]", got)
	}
	if s := got.String(true, true); s != "np=3 rp=3,5" {
		t.Errorf("String = %q", s)
	}
	root = fixture(t, "ens1f0np0", nil, nil)
	got, err = New(Options{Root: root}).Observe("ens1f0np0")
	if err != nil || got.NP == nil || len(got.NP) != 0 || len(got.RP) != 0 {
		t.Errorf("all off: Observe = %#v, %v; want empty, non-nil lists", got, err)
	}
	if s := got.String(true, false); s != "np=none" {
		t.Errorf("String(np only) = %q", s)
	}
}

// TestApplyWritesOnlyDiffering: the files that already hold the wanted
// value are not written (their modification time stays), the others are.
func TestApplyWritesOnlyDiffering(t *testing.T) {
	const nd = "ens1f0np0"
	root := fixture(t, nd, []int{3, 4}, []int{1})
	old := time.Now().Add(-time.Hour)
	for _, pt := range []string{NP, RP} {
		for p := 0; p < Priorities; p++ {
			if err := os.Chtimes(enableFile(root, nd, pt, p), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := mtimes(t, root, nd)
	c := New(Options{Root: root})
	wrote, err := c.Apply(nd, Want{NP: []int{3}, RP: []int{3}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"roce_np/enable/4", "roce_rp/enable/1", "roce_rp/enable/3"}
	if !slices.Equal(wrote, want) {
		t.Errorf("wrote %v, want %v", wrote, want)
	}
	after := mtimes(t, root, nd)
	for k, tm := range after {
		changed := !tm.Equal(before[k])
		if changed != slices.Contains(want, k) {
			t.Errorf("%s: written = %v, want %v", k, changed, !changed)
		}
	}
	got, err := c.Observe(nd)
	if err != nil || !slices.Equal(got.NP, []int{3}) || !slices.Equal(got.RP, []int{3}) {
		t.Errorf("after Apply: %+v, %v", got, err)
	}
	// Nothing differs: nothing written.
	if wrote, err := c.Apply(nd, Want{NP: []int{3}, RP: []int{3}}); err != nil || len(wrote) != 0 {
		t.Errorf("second Apply wrote %v, %v; want nothing", wrote, err)
	}
	// An unmanaged point (nil) is left alone; [] disables every priority.
	if _, err := c.Apply(nd, Want{NP: []int{}}); err != nil {
		t.Fatal(err)
	}
	got, _ = c.Observe(nd)
	if len(got.NP) != 0 || !slices.Equal(got.RP, []int{3}) {
		t.Errorf("np [] with rp unmanaged: %+v, want np none, rp [3]", got)
	}
}

// TestSymlinkNotFollowed: a symlink planted where an enable file or
// directory should be is neither read nor written through.
func TestSymlinkNotFollowed(t *testing.T) {
	const nd = "ens1f0np0"
	for _, tt := range []struct {
		name  string
		plant func(t *testing.T, root, victim string)
	}{
		{"file", func(t *testing.T, root, victim string) {
			f := enableFile(root, nd, RP, 3)
			os.Remove(f)
			if err := os.Symlink(victim, f); err != nil {
				t.Fatal(err)
			}
		}},
		{"enable directory", func(t *testing.T, root, victim string) {
			dir := filepath.Dir(enableFile(root, nd, RP, 3))
			vdir := filepath.Join(filepath.Dir(victim), "vdir")
			os.Rename(dir, vdir)
			if err := os.Symlink(vdir, dir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, nd, []int{3}, nil)
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte("0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, root, victim)
			c := New(Options{Root: root})
			_, err := c.Apply(nd, Want{RP: []int{3}})
			if err == nil || !errors.Is(err, unix.ELOOP) || !strings.Contains(err.Error(), nd) || !strings.Contains(err.Error(), "symlink") {
				t.Errorf("Apply through a symlink: %v; want ELOOP naming %s and the symlink", err, nd)
			}
			if b, _ := os.ReadFile(victim); string(b) != "0\n" {
				t.Errorf("the symlink's target was written: %q", b)
			}
			if _, err := c.Observe(nd); !errors.Is(err, unix.ELOOP) {
				t.Errorf("Observe through a symlink: %v; want ELOOP", err)
			}
		})
	}
}

func TestUnsupported(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys", "class", "net", "eth0"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Root: root})
	_, err := c.Observe("eth0")
	if !IsUnsupported(err) || !strings.Contains(err.Error(), "eth0") {
		t.Errorf("Observe without ecn: %v; want unsupported naming eth0", err)
	}
	if _, err := c.Apply("eth0", Want{NP: []int{3}}); !IsUnsupported(err) {
		t.Errorf("Apply without ecn: %v; want unsupported", err)
	}
	// A netdev that does not exist is gone (ENODEV), not unsupported.
	if _, err := c.Observe("eth9"); IsUnsupported(err) || !errors.Is(err, unix.ENODEV) {
		t.Errorf("Observe of a missing netdev: %v; want ENODEV", err)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if _, err := c.Observe(bad); err == nil || IsUnsupported(err) {
			t.Errorf("Observe(%q) = %v; want an invalid name error", bad, err)
		}
	}
}

func TestBadContent(t *testing.T) {
	const nd = "ens1f0np0"
	root := fixture(t, nd, nil, nil)
	f := enableFile(root, nd, NP, 2)
	os.WriteFile(f, []byte("maybe\n"), 0o644)
	_, err := New(Options{Root: root}).Observe(nd)
	if err == nil || !strings.Contains(err.Error(), "roce_np/enable/2") || !strings.Contains(err.Error(), "want 0 or 1") {
		t.Errorf("Observe with a bad file: %v", err)
	}
	os.Remove(f)
	_, err = New(Options{Root: root}).Apply(nd, Want{NP: []int{2}})
	if err == nil || !strings.Contains(err.Error(), "roce_np/enable/2") {
		t.Errorf("Apply with a missing file: %v", err)
	}
	if _, err := New(Options{Root: root}).Apply(nd, Want{NP: []int{8}}); err == nil {
		t.Error("Apply of priority 8 succeeded")
	}
}
