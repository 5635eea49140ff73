package ethtool

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/genetlink/genltest"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/hexdump"
)

// readHex reads an annotated hex dump from testdata: hex bytes, "#" to the
// end of the line is a comment.
func readHex(t *testing.T, name string) []byte {
	t.Helper()
	b, err := hexdump.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testFamily is the ethtool family as the fixture kernel registered it.
var testFamily = genetlink.Family{ID: 0x1b, Name: genlName, Version: genlVersion}

// kernel is a generic netlink kernel (genltest) that registers testFamily
// and answers ETHTOOL_MSG_PAUSE_GET requests with reply(flags), where flags
// are the request header's ETHTOOL_A_HEADER_FLAGS: a netlink message (the
// fixture's bytes), or an errno it answers with NLMSG_ERROR, or another
// error the connection returns. It checks the request as the kernel would
// see it and counts the requests.
type kernel struct {
	t        *testing.T
	netdev   string
	reply    func(flags uint32) ([]byte, error)
	requests int
}

// reader returns a Reader of k, which looks the family up as Open does;
// the test closes it.
func (k *kernel) reader() *Reader {
	k.t.Helper()
	gc := genltest.Dial(genltest.ServeFamily(testFamily,
		genltest.CheckRequest(testFamily.ID, msgPauseGet, netlink.Request, k.serve)))
	r, err := newReader(gc, -1)
	if err != nil {
		k.t.Fatal(err)
	}
	if diff := cmp.Diff(testFamily, r.family); diff != "" {
		k.t.Errorf("family (-want +got):\n%s", diff)
	}
	k.t.Cleanup(func() { r.Close() })
	return r
}

func (k *kernel) serve(greq genetlink.Message, _ netlink.Message) ([]genetlink.Message, error) {
	k.requests++
	if greq.Header.Version != genlVersion {
		k.t.Errorf("generic netlink header %+v: want version %d", greq.Header, genlVersion)
	}
	name, flags := "", uint32(0)
	ad, err := netlink.NewAttributeDecoder(greq.Data)
	if err != nil {
		k.t.Fatal(err)
	}
	for ad.Next() {
		if ad.Type() != attrPauseHeader {
			k.t.Errorf("request attribute %d: want only ETHTOOL_A_PAUSE_HEADER", ad.Type())
			continue
		}
		ad.Nested(func(nad *netlink.AttributeDecoder) error {
			for nad.Next() {
				switch nad.Type() {
				case attrHeaderDevName:
					name = nad.String()
				case attrHeaderFlags:
					flags = nad.Uint32()
				default:
					k.t.Errorf("request header attribute %d", nad.Type())
				}
			}
			return nil
		})
	}
	if err := ad.Err(); err != nil {
		k.t.Fatal(err)
	}
	if name != k.netdev {
		k.t.Errorf("request for %q, want %q", name, k.netdev)
	}
	b, err := k.reply(flags)
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return nil, genltest.Error(int(errno))
	}
	if err != nil {
		return nil, err
	}
	var m netlink.Message
	if err := m.UnmarshalBinary(b); err != nil {
		k.t.Fatalf("fixture: %v", err)
	}
	var gm genetlink.Message
	if err := gm.UnmarshalBinary(m.Data); err != nil {
		k.t.Fatalf("fixture: %v", err)
	}
	return []genetlink.Message{gm}, nil
}

// statsOnly returns the fixture to a request with ETHTOOL_FLAG_STATS and
// fails the test for one without.
func statsOnly(t *testing.T, b []byte) func(uint32) ([]byte, error) {
	return func(flags uint32) ([]byte, error) {
		if flags != flagStats {
			t.Errorf("request flags %#x, want ETHTOOL_FLAG_STATS (%#x)", flags, flagStats)
		}
		return b, nil
	}
}

// TestPauseFixtures decodes the kernel's replies for the pause statistics a
// veth does not have, through the Reader's own request.
func TestPauseFixtures(t *testing.T) {
	withStats := Pause{Ifindex: 4, Netdev: "ens1f0np0", RX: true, TX: true,
		TXFrames: 4294967297, RXFrames: 5000000000, HasTXFrames: true, HasRXFrames: true}
	for _, tt := range []struct {
		file, netdev string
		want         Pause
	}{
		{"pause-stats.hex", "ens1f0np0", withStats},
		{"pause-stats-pad.hex", "ens1f0np0", withStats},
		{"pause-nostats.hex", "eno1", Pause{Ifindex: 2, Netdev: "eno1", RX: true, TX: true}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			k := &kernel{t: t, netdev: tt.netdev}
			k.reply = statsOnly(t, readHex(t, tt.file))
			r := k.reader()
			got, err := r.Pause(tt.netdev)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Pause(%s) (-want +got):\n%s", tt.netdev, diff)
			}
			c := Counters{Netdev: tt.netdev, Pause: &got, Driver: map[string]uint64{"rx_prio3_pause": 7}}
			wantFlat := map[string]uint64{"rx_prio3_pause": 7}
			if got.HasTXFrames {
				wantFlat[FlatTXPauseFrames], wantFlat[FlatRXPauseFrames] = 4294967297, 5000000000
			}
			if diff := cmp.Diff(wantFlat, c.Flat()); diff != "" {
				t.Errorf("Flat (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPauseOldKernel: a kernel before 5.11 refuses ETHTOOL_FLAG_STATS with
// EOPNOTSUPP; the Reader asks again without it and gets the settings.
func TestPauseOldKernel(t *testing.T) {
	fixture := readHex(t, "pause-nostats.hex")
	k := &kernel{t: t, netdev: "eno1", reply: func(flags uint32) ([]byte, error) {
		if flags&flagStats != 0 {
			return nil, unix.EOPNOTSUPP
		}
		return fixture, nil
	}}
	r := k.reader()
	got, err := r.Pause("eno1")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Pause{Ifindex: 2, Netdev: "eno1", RX: true, TX: true}); got != want {
		t.Errorf("Pause = %+v, want %+v", got, want)
	}
	if k.requests != 2 {
		t.Errorf("%d requests, want 2 (with the stats flag, then without)", k.requests)
	}
}

// TestPauseUnsupported: a driver without pause parameters answers
// EOPNOTSUPP to both requests; the error names the netdev and matches
// errors.ErrUnsupported.
func TestPauseUnsupported(t *testing.T) {
	k := &kernel{t: t, netdev: "veth0", reply: func(uint32) ([]byte, error) { return nil, unix.EOPNOTSUPP }}
	r := k.reader()
	_, err := r.Pause("veth0")
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Pause: %v, want an error matching errors.ErrUnsupported", err)
	}
	for _, want := range []string{"pause statistics of veth0", "unsupported", "ethtool -I -a veth0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}

	// A kernel without the family (before 5.6, or without
	// CONFIG_ETHTOOL_NETLINK): the controller answers ENOENT.
	noFamily, err := newReader(genltest.Dial(func(greq genetlink.Message, nreq netlink.Message) ([]genetlink.Message, error) {
		if nreq.Header.Type != unix.GENL_ID_CTRL || greq.Header.Command != unix.CTRL_CMD_GETFAMILY {
			t.Errorf("request %+v %+v to a kernel without the family", nreq.Header, greq.Header)
		}
		return nil, genltest.Error(int(unix.ENOENT))
	}), -1)
	if err != nil {
		t.Fatalf("a kernel without the family: %v, want a Reader that says so", err)
	}
	defer noFamily.Close()
	if _, err := noFamily.Pause("veth0"); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "veth0") || !strings.Contains(err.Error(), "no ethtool netlink interface") {
		t.Errorf("Pause without the ethtool family: %v", err)
	}
	// Another failure of the lookup fails newReader.
	if _, err := newReader(genltest.Dial(func(genetlink.Message, netlink.Message) ([]genetlink.Message, error) {
		return nil, genltest.Error(int(unix.EPERM))
	}), -1); !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), `family "ethtool"`) {
		t.Errorf("newReader when the lookup fails: %v, want EPERM naming the family", err)
	}
}

// TestPauseErrors: other failures are errors that name the netdev, and a
// reply for another netdev or with another command is refused.
func TestPauseErrors(t *testing.T) {
	stats := readHex(t, "pause-stats.hex")
	for _, tt := range []struct {
		name   string
		reply  func(uint32) ([]byte, error)
		netdev string
		want   string
	}{
		{"gone", func(uint32) ([]byte, error) { return nil, unix.ENODEV }, "ens1f0np0", "the netdev is gone"},
		{"other netdev", func(uint32) ([]byte, error) { return stats, nil }, "ens1f1np1", "the kernel answered for ens1f0np0"},
		{"wrong command", func(uint32) ([]byte, error) {
			b := append([]byte(nil), stats...)
			b[16] = msgPauseGet
			return b, nil
		}, "ens1f0np0", "reply command 21"},
		{"truncated", func(uint32) ([]byte, error) {
			b := append([]byte(nil), stats[:len(stats)-4]...)
			b[0] -= 4
			return b, nil
		}, "ens1f0np0", "decode ETHTOOL_MSG_PAUSE_GET_REPLY"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := &kernel{t: t, netdev: tt.netdev, reply: tt.reply}
			r := k.reader()
			_, err := r.Pause(tt.netdev)
			if err == nil || errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), tt.netdev) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Pause(%s): %v; want an error naming it and saying %q", tt.netdev, err, tt.want)
			}
		})
	}
	r := (&kernel{t: t}).reader()
	for _, bad := range []string{"", "a/b", "sixteen-bytes-xx", "x y"} {
		if _, err := r.Pause(bad); err == nil {
			t.Errorf("Pause(%q) accepted a name no netdev can have", bad)
		}
	}
}
