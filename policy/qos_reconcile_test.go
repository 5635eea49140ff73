package policy

import (
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/dcb"
	"github.com/rdmad/rdmad/policy/qos"
)

// dcbOnlyPFC is a dcbnl that answers DCB_CMD_IEEE_GET for lo with a PFC
// object and nothing else, as a driver with ieee_getpfc but no
// ieee_getets does, and counts the requests it gets.
func dcbOnlyPFC(t *testing.T, requests *int) *dcb.Conn {
	t.Helper()
	c := dcb.NewConn(nltest.Dial(func(reqs []netlink.Message) ([]netlink.Message, error) {
		*requests++
		req := reqs[0]
		if req.Header.Type != 78 || len(req.Data) < 4 || req.Data[1] != 21 { // RTM_GETDCB, DCB_CMD_IEEE_GET
			return nltest.Error(int(syscall.EOPNOTSUPP), reqs)
		}
		ae := netlink.NewAttributeEncoder()
		ae.String(1, "lo")                 // DCB_ATTR_IFNAME
		ae.Do(13, func() ([]byte, error) { // DCB_ATTR_IEEE
			nae := netlink.NewAttributeEncoder()
			pfc := make([]byte, 136) // struct ieee_pfc
			pfc[0] = 8
			nae.Bytes(2, pfc) // DCB_ATTR_IEEE_PFC
			return nae.Encode()
		})
		b, err := ae.Encode()
		if err != nil {
			return nil, err
		}
		return []netlink.Message{{Header: netlink.Header{Type: 78, Sequence: req.Header.Sequence},
			Data: append([]byte{0, 21, 0, 0}, b...)}}, nil
	}))
	t.Cleanup(func() { c.Close() })
	return c
}

// TestQoSETSUnsupportedOnce: a device with DCB but no ETS object makes an
// ETS policy's target unsupported, with the reason, and is not asked
// again at the next pass.
func TestQoSETSUnsupportedOnce(t *testing.T) {
	var n int
	r := &Reconciler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}, dcb: dcbOnlyPFC(t, &n)}
	ets := qos.ETS{TSA: [8]string{"ets", "ets", "strict", "strict", "strict", "strict", "strict", "strict"}, BW: [8]int{50, 50}}
	decl := Declared{Rules: []Rule{{Name: "fabric", Netdevs: []string{"lo"}, QoS: &qos.Desired{ETS: &ets}}}}

	_, ps := r.Pass(decl, nil, nil, true)
	tg := findTarget(t, ps, "qos", "lo")
	if tg.State != apitype.Unsupported || !strings.Contains(tg.Error, "does not report ETS") {
		t.Fatalf("target = %+v, want unsupported saying the driver does not report ETS", tg)
	}
	if want := "prio_tc=0,0,0,0,0,0,0,0 tsa=ets,ets,strict,strict,strict,strict,strict,strict tc_bw=50,50,0,0,0,0,0,0"; tg.Desired != want {
		t.Errorf("Desired = %q, want %q", tg.Desired, want)
	}
	before := n
	_, ps = r.Pass(decl, nil, nil, true)
	if n != before {
		t.Errorf("second pass sent %d dcbnl requests, want none (unsupported is remembered)", n-before)
	}
	if tg := findTarget(t, ps, "qos", "lo"); tg.State != apitype.Unsupported {
		t.Errorf("second pass: target = %+v, want still unsupported", tg)
	}
	r.Forget()
	r.Pass(decl, nil, nil, true)
	if n == before {
		t.Error("after Forget (a reload) the device was not asked again")
	}
}

func findTarget(t *testing.T, ps []apitype.PolicyStatus, kind, object string) apitype.Target {
	t.Helper()
	for _, p := range ps {
		for _, tg := range p.Targets {
			if tg.Kind == kind && tg.Object == object {
				return tg
			}
		}
	}
	t.Fatalf("no %s target for %s in %+v", kind, object, ps)
	return apitype.Target{}
}
