package pingmesh

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/client/apitype"
)

func TestWindowStats(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		size    int
		samples []sample
		want    winStats
	}{
		{"empty", 4, nil, winStats{}},
		{"all answered", 4, []sample{{rtt: 1 * ms}, {rtt: 2 * ms}, {rtt: 3 * ms}, {rtt: 4 * ms, host: ms}},
			winStats{Samples: 4, P50: 2 * ms, P99: 4 * ms, HostP99: ms}},
		{"one lost of four", 4, []sample{{rtt: ms}, {lost: true}, {rtt: 3 * ms}, {rtt: 2 * ms}},
			winStats{Samples: 4, Lost: 1, LossPct: 25, P50: 2 * ms, P99: 3 * ms}},
		{"wraps: old samples leave", 2, []sample{{lost: true}, {lost: true}, {rtt: 5 * ms}, {rtt: 7 * ms}},
			winStats{Samples: 2, P50: 5 * ms, P99: 7 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindow(tt.size)
			for _, s := range tt.samples {
				w.add(s)
			}
			if diff := cmp.Diff(tt.want, w.stats()); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHealth drives the state machine through sequences of outcomes
// ('.' answered fast, 's' answered slow, 'x' lost) and checks the state
// after each step.
func TestHealth(t *testing.T) {
	th := Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 10, MinLosses: 2, RTT: 10 * time.Millisecond}
	tests := []struct {
		name   string
		window int
		steps  string
		want   string // state after each step: u(nknown) U(p) D(egraded) X (down)
	}{
		{"first answer: up", 20, ".", "U"},
		{"unknown until down", 20, "xxx", "uuX"},
		{"one loss is noise", 20, "..x..", "UUUUU"},
		{"two losses in the window: degraded", 10, "..x.x", "UUUUD"},
		{"three in a row: down", 20, "...xxx", "UUUUDX"},
		{"down needs three answers to come back", 20, "xxx..x...", "uuXXXXXXU"},
		{"back from down starts a clean window", 20, "xxx...", "uuXXXU"},
		{"degraded holds while two losses are in the window", 10, "x.x.......x.....", "uUDDDDDDDDDDUUUU"},
		{"degraded clears when losses age out", 4, "x.x.....", "uUDDUUUU"},
		{"slow p99: degraded", 12, "..........ss", "UUUUUUUUUUDD"},
	}
	codes := map[string]byte{apitype.PeerUnknown: 'u', apitype.PeerUp: 'U', apitype.PeerDegraded: 'D', apitype.PeerDown: 'X'}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindow(tt.window)
			h := newHealth(time.Unix(0, 0))
			var got []byte
			for i, c := range tt.steps {
				s := sample{rtt: time.Millisecond}
				switch c {
				case 'x':
					s = sample{lost: true}
				case 's':
					s = sample{rtt: 50 * time.Millisecond}
				}
				h.observe(s, w, th, time.Unix(int64(i), 0))
				got = append(got, codes[h.state])
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWindowLossCount checks the running loss count against a recount over
// long random sequences with wraps and resets.
func TestWindowLossCount(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 7, 100} {
		w := newWindow(size)
		for i := range 5000 {
			if r.IntN(500) == 0 {
				w.reset()
			}
			w.add(sample{lost: r.IntN(3) == 0, rtt: time.Duration(r.IntN(1000))})
			n := w.next
			if w.full {
				n = len(w.s)
			}
			want := 0
			for _, s := range w.s[:n] {
				if s.lost {
					want++
				}
			}
			if got := w.loss(); got.Lost != want || got.Samples != n {
				t.Fatalf("size %d, step %d: loss() = %+v, recount %d lost of %d", size, i, got, want, n)
			}
		}
	}
}

// BenchmarkWindowStats is one path's statistics at publish time (a full
// window of 100). test/bench/peers also runs it on the host and in the
// guest to measure how much slower the emulated CPU runs this code.
func BenchmarkWindowStats(b *testing.B) {
	w := newWindow(100)
	for i := range 100 {
		w.add(sample{lost: i%17 == 0, rtt: time.Duration((i * 7919) % 1000), host: time.Duration(i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		w.stats()
	}
}
