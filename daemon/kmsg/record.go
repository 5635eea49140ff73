package kmsg

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Syslog facilities (syslog(2)). The kernel's own messages are kern (0);
// a line written to /dev/kmsg gets user (1) unless it names another
// facility, and never kern (devkmsg_write keeps user for a facility of
// 0), so the facility tells the kernel's word from a writer's. Only kern
// counts, and user with Options.TrustUserspace (tests); others (systemd's
// early boot messages, LOG_DAEMON) are services' lines that reached the
// kernel log before journald ran.
const (
	facilityKern = 0
	facilityUser = 1
)

// A Record is one /dev/kmsg record (Documentation/ABI/testing/dev-kmsg):
//
//	PRI,SEQ,TS_USEC,FLAGS[,more];MESSAGE\n
//	 SUBSYSTEM=pci\n
//	 DEVICE=+pci:0000:03:00.0\n
//
// Its byte slices point into the buffer it was parsed from.
type Record struct {
	// Priority is the syslog severity (0 emerg .. 7 debug), Facility the
	// facility (0 kernel, 1 user, ...).
	Priority int
	Facility int
	Seq      uint64
	// TS is the kernel's timestamp in microseconds since boot (its
	// monotonic clock).
	TS uint64
	// Message is the text, as the kernel escaped it (\xNN for bytes below
	// space, above '~' and for '\').
	Message []byte
	// Subsystem and Device are the dictionary's SUBSYSTEM and DEVICE
	// values that dev_printk adds, nil when absent: DEVICE is
	// "+<subsystem>:<name>" ("+pci:0000:03:00.0", "+infiniband:rxe0"),
	// "n<ifindex>" for a netdev, "b" or "c" and major:minor for block and
	// character devices.
	Subsystem []byte
	Device    []byte
}

// errRecord is wrapped by every ParseRecord error.
var errRecord = errors.New("malformed kmsg record")

// ParseRecord parses one record as a read(2) of /dev/kmsg returns it (one
// record per read). It never panics; a malformed record is an error
// matching errRecord that says what is wrong. Header fields after FLAGS
// (",caller=T123" with CONFIG_PRINTK_CALLER) and unknown dictionary keys
// are ignored.
func ParseRecord(b []byte) (Record, error) {
	var r Record
	semi := bytes.IndexByte(b, ';')
	if semi < 0 {
		return r, fmt.Errorf("%w: no ';' after the header", errRecord)
	}
	hdr, rest := b[:semi], b[semi+1:]
	var fields [4][]byte
	n := 0
	for i := 0; i < len(fields); i++ {
		f, tail, found := bytes.Cut(hdr, []byte{','})
		fields[i] = f
		n++
		if !found {
			break
		}
		hdr = tail
	}
	if n < 4 {
		return r, fmt.Errorf("%w: header has %d fields, want PRI,SEQ,TS_USEC,FLAGS", errRecord, n)
	}
	pri, err := parseUint(fields[0], 1<<10)
	if err != nil {
		return r, fmt.Errorf("%w: PRI %q: %v", errRecord, fields[0], err)
	}
	if r.Seq, err = parseUint(fields[1], 1<<63); err != nil {
		return r, fmt.Errorf("%w: SEQ %q: %v", errRecord, fields[1], err)
	}
	if r.TS, err = parseUint(fields[2], 1<<63); err != nil {
		return r, fmt.Errorf("%w: TS_USEC %q: %v", errRecord, fields[2], err)
	}
	r.Priority = int(pri & 7)
	r.Facility = int(pri >> 3)

	msg, dict, _ := bytes.Cut(rest, []byte{'\n'})
	r.Message = msg
	for len(dict) > 0 {
		var line []byte
		line, dict, _ = bytes.Cut(dict, []byte{'\n'})
		// Continuation lines start with a space; the kernel writes no
		// other kind, so anything else ends the record.
		if len(line) == 0 || line[0] != ' ' {
			break
		}
		k, v, ok := bytes.Cut(line[1:], []byte{'='})
		if !ok {
			continue
		}
		switch string(k) {
		case "SUBSYSTEM":
			r.Subsystem = v
		case "DEVICE":
			r.Device = v
		}
	}
	return r, nil
}

// parseUint parses a decimal below limit without allocating.
func parseUint(b []byte, limit uint64) (uint64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty")
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, strconv.ErrSyntax
		}
		if v > limit/10 {
			return 0, strconv.ErrRange
		}
		v = v*10 + uint64(c-'0')
		if v >= limit {
			return 0, strconv.ErrRange
		}
	}
	return v, nil
}
