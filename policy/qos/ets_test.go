package qos

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/policy/dcb"
)

// roceETS puts priority 3 in class 1 with 60% and the rest in class 0
// with 40%; classes 2..7 are strict.
func roceETS() ETS {
	return ETS{
		PrioTC: [8]int{0, 0, 0, 1, 0, 0, 0, 0},
		TSA:    [8]string{"ets", "ets", "strict", "strict", "strict", "strict", "strict", "strict"},
		BW:     [8]int{40, 60},
	}
}

// mlx5ETS is an ETS object as mlx5 reports one: 8 strict classes,
// priority n in class n, and 100 as the bandwidth of each strict class.
func mlx5ETS() *dcb.ETS {
	e := &dcb.ETS{Cap: 8}
	for i := range 8 {
		e.TCTSA[i] = dcb.TSAStrict
		e.TCTxBW[i] = 100
		e.PrioTC[i] = uint8(i)
	}
	return e
}

func TestETSValidate(t *testing.T) {
	mod := func(f func(*ETS)) ETS { e := roceETS(); f(&e); return e }
	tests := []struct {
		name    string
		ets     ETS
		wantErr string
	}{
		{name: "ok", ets: roceETS()},
		{name: "all strict", ets: ETS{TSA: [8]string{"strict", "strict", "strict", "strict", "strict", "strict", "strict", "vendor"}}},
		{name: "class out of range", ets: mod(func(e *ETS) { e.PrioTC[5] = 8 }), wantErr: "priority 5 -> traffic class 8: want 0..7"},
		{name: "unknown tsa", ets: mod(func(e *ETS) { e.TSA[2] = "wrr" }), wantErr: `traffic class 2: "wrr" is not`},
		{name: "empty tsa", ets: mod(func(e *ETS) { e.TSA[7] = "" }), wantErr: "traffic class 7"},
		{name: "share of strict class", ets: mod(func(e *ETS) { e.BW[2] = 10; e.BW[0] = 30 }), wantErr: "traffic class 2 is strict and gets no share"},
		{name: "sum not 100", ets: mod(func(e *ETS) { e.BW[0] = 30 }), wantErr: "sum to 90%, want 100%"},
		{name: "share over 100", ets: mod(func(e *ETS) { e.BW[0] = 140 }), wantErr: "140% is not 0..100"},
		{name: "negative share", ets: mod(func(e *ETS) { e.BW[0] = -1 }), wantErr: "-1% is not 0..100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Desired{ETS: &tt.ets}.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestPlanETS(t *testing.T) {
	want := roceETS()
	inSync := mlx5ETS()
	inSync.PrioTC = [8]uint8{0, 0, 0, 1, 0, 0, 0, 0}
	inSync.TCTSA[0], inSync.TCTSA[1] = dcb.TSAETS, dcb.TSAETS
	inSync.TCTxBW[0], inSync.TCTxBW[1] = 40, 60

	four := mlx5ETS()
	four.Cap = 4

	tests := []struct {
		name    string
		ets     *dcb.ETS
		desired ETS
		want    []string
		wantErr string
		unsupp  bool
	}{
		{name: "in sync, strict classes reported as 100", ets: inSync, desired: want},
		{name: "defaults", ets: mlx5ETS(), desired: want, want: []string{
			"ets: prio_tc=0,1,2,3,4,5,6,7 tsa=strict,strict,strict,strict,strict,strict,strict,strict tc_bw=0,0,0,0,0,0,0,0" +
				" -> prio_tc=0,0,0,1,0,0,0,0 tsa=ets,ets,strict,strict,strict,strict,strict,strict tc_bw=40,60,0,0,0,0,0,0"}},
		{name: "beyond ets_cap", ets: four, desired: ETS{PrioTC: [8]int{0, 0, 0, 5}, TSA: want.TSA, BW: want.BW},
			wantErr: "priority 3 -> traffic class 5, but the device has 4 traffic classes (ets_cap 4): use classes 0..3"},
		{name: "share beyond ets_cap", ets: four,
			desired: ETS{TSA: [8]string{"ets", "strict", "strict", "strict", "strict", "ets", "strict", "strict"}, BW: [8]int{50, 0, 0, 0, 0, 50}},
			wantErr: "traffic class 5 gets 50%, but the device has 4 traffic classes"},
		{name: "classes beyond ets_cap are not compared", ets: func() *dcb.ETS {
			e := *inSync
			e.Cap = 4
			e.TCTSA[6] = dcb.TSAVendor
			return &e
		}(), desired: want},
		{name: "no ETS object", ets: nil, desired: want, wantErr: "does not report ETS", unsupp: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.desired
			changes, err := Plan(Desired{ETS: &d}, observed(dcb.IEEE{ETS: tt.ets}))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Plan = %v, want an error containing %q", err, tt.wantErr)
				}
				if IsUnsupported(err) != tt.unsupp {
					t.Errorf("IsUnsupported(%v) = %v, want %v", err, !tt.unsupp, tt.unsupp)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, c.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestApplyETS writes ETS to the fake kernel, which checks the shares the
// way mlx5 does and keeps the bytes it was sent: the next observation is
// in sync, and the fields rdmad does not manage are the device's.
func TestApplyETS(t *testing.T) {
	f := newFake()
	e := mlx5ETS()
	e.Willing, e.TCRxBW[2], e.TCRecoBW[1] = 1, 7, 9
	f.ets = etsBytes(e)
	c := f.conn(t)
	want := roceETS()
	d := Desired{ETS: &want, PFC: []int{3}}

	if changes := reconcile(t, c, f.ifname, d); len(changes) != 1 || changes[0].Kind != KindETS {
		t.Fatalf("first round planned %v, want one ETS change", changes)
	}
	a, err := Observe(c, f.ifname)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, ETSFrom(a.IEEE.ETS)); diff != "" {
		t.Errorf("ETS after apply (-want +got):\n%s", diff)
	}
	got := a.IEEE.ETS
	if got.Cap != 8 || got.Willing != 1 || got.TCRxBW[2] != 7 || got.TCRecoBW[1] != 9 {
		t.Errorf("unmanaged ETS fields changed: %+v", *got)
	}
	if changes := reconcile(t, c, f.ifname, d); len(changes) != 0 {
		t.Errorf("second round planned %v, want nothing", changes)
	}
}

// etsBytes is struct ieee_ets as the kernel sends it, at the offsets
// <linux/dcbnl.h> gives (checked in package dcb).
func etsBytes(e *dcb.ETS) []byte {
	b := make([]byte, 59)
	b[0], b[1], b[2] = e.Willing, e.Cap, e.CBS
	copy(b[3:], e.TCTxBW[:])
	copy(b[11:], e.TCRxBW[:])
	copy(b[19:], e.TCTSA[:])
	copy(b[27:], e.PrioTC[:])
	copy(b[35:], e.TCRecoBW[:])
	copy(b[43:], e.TCRecoTSA[:])
	copy(b[51:], e.RecoPrioTC[:])
	return b
}
