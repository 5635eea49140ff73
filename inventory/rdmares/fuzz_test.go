package rdmares

import (
	"testing"
)

// FuzzDecodeResources feeds the messages of arbitrary datagrams to every
// dump's decoder:
// it must return an error or objects, never panic, and every object it
// returns must be whole (a kind, a device, one owner at most, a length
// only on a memory region).
func FuzzDecodeResources(f *testing.F) {
	for _, name := range []string{"res-get.hex", "res-qp.hex", "res-cq.hex", "res-mr.hex", "res-mr-pad.hex", "res-pd.hex"} {
		f.Add(readHex(f, name))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The messages netlink.Conn would split the datagram into (the
		// framing is its to check).
		msgs, _ := splitMessages(b)
		feedMsgs := func(d *dump) {
			for _, m := range msgs {
				if done, err := d.message(m); done || err != nil {
					return
				}
			}
		}
		sd := &dump{summary: true}
		feedMsgs(sd)
		for _, dev := range sd.devices {
			if len(dev.Tracked) > 64 || len(dev.Name) > 4*maxString {
				t.Fatalf("device %+v beyond the bounds", dev)
			}
		}
		for _, k := range Kinds {
			d := &dump{kind: k}
			feedMsgs(d)
			for _, o := range d.objects {
				if o.Kind != k || (o.PID != 0 && o.KernName != "") || (o.Length != 0 && k != MR) {
					t.Fatalf("%v dump returned %+v", k, o)
				}
				if o.KernName != Printable(o.KernName) || o.Device != Printable(o.Device) {
					t.Fatalf("unprintable names in %+v", o)
				}
			}
		}
	})
}
