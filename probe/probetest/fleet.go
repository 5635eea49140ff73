package probetest

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/rusage"
	"github.com/rdmad/rdmad/probe/wire"
)

// A FakeFleet stands in for the peers' control endpoints, in a process of
// its own (the calling test binary again, see RunFleetChild), so that
// neither its CPU time nor its allocations, threads or sockets count as
// the node's: peer i has a UDP socket on its own loopback address
// (FleetAddr(i)) and the node's control port, connected to the node's
// endpoint. It answers the node's queries (version 1 or 2, with the
// fingerprint it was given) and, as every peer re-asks once a minute,
// sends each peer's query to the node once per period.
type FakeFleet struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// FleetStats are the fake fleet's counters and CPU time.
type FleetStats struct {
	Answered uint64        // the node's queries answered
	Asked    uint64        // the peers' own queries sent to the node
	CPU      time.Duration // the fleet process's user+system CPU time
}

// fleetEnv selects the fleet mode of the test binary:
// "n ports node-addr:port period fingerprint-hex".
const fleetEnv = "RDMAD_PINGMESH_FLEET"

// RunFleetChild serves the fake fleet and exits when this process is one
// that StartFleet started, and returns at once otherwise. A test binary
// that starts a fleet calls it first thing in its TestMain.
func RunFleetChild() {
	if spec := os.Getenv(fleetEnv); spec != "" {
		os.Exit(runFleet(spec))
	}
}

// StartFleet starts n fake peers with ports probe ports each, whose
// sockets are connected to the node's control endpoint node; they answer
// with the fingerprint fp (wire.Fingerprint.Marshal) and each asks the
// node once per period (0: never). It returns once every socket is bound.
// The fleet runs until Close. Raising the open files limit for n sockets
// is the fleet's own business.
func StartFleet(n, ports int, node netip.AddrPort, fp []byte, period time.Duration) (*FakeFleet, error) {
	return StartFleetFlows(n, ports, 1, node, fp, period)
}

// StartFleetFlows is StartFleet with peers whose version-2 answers say they
// admitted flows-1 further probe flows of the node's ([probe] flows).
func StartFleetFlows(n, ports, flows int, node netip.AddrPort, fp []byte, period time.Duration) (*FakeFleet, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s %x %d", fleetEnv, n, ports, node, period, fp, flows))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("fake fleet: %w", err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("fake fleet: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fake fleet: start %s: %w", os.Args[0], err)
	}
	f := &FakeFleet{cmd: cmd, in: in, out: bufio.NewReader(outp)}
	if line, err := f.out.ReadString('\n'); err != nil || line != "ready\n" {
		f.Close()
		return nil, fmt.Errorf("fake fleet of %d peers did not start: first line %q, %v (does the test binary's TestMain call probetest.RunFleetChild first?)", n, line, err)
	}
	return f, nil
}

// Stats asks the fleet for its counters.
func (f *FakeFleet) Stats() (FleetStats, error) {
	var st FleetStats
	var cpu int64
	if _, err := io.WriteString(f.in, "stats\n"); err != nil {
		return st, fmt.Errorf("fake fleet stats: %w", err)
	}
	line, err := f.out.ReadString('\n')
	if err == nil {
		_, err = fmt.Sscan(line, &st.Answered, &st.Asked, &cpu)
	}
	if err != nil {
		return st, fmt.Errorf("fake fleet stats %q: %w", line, err)
	}
	st.CPU = time.Duration(cpu)
	return st, nil
}

// Close stops the fleet (it exits at the end of its input) and waits for
// its process.
func (f *FakeFleet) Close() error {
	f.in.Close()
	return f.cmd.Wait()
}

// runFleet is the fake fleet's process.
func runFleet(spec string) int {
	var n, ports, flows int
	var node, periodS, fpHex string
	if _, err := fmt.Sscan(spec, &n, &ports, &node, &periodS, &fpHex, &flows); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	period, err1 := time.ParseDuration(periodS)
	fp, err2 := hex.DecodeString(fpHex)
	nodeAP, err3 := netip.ParseAddrPort(node)
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(n)+256 {
		lim.Cur = min(lim.Max, uint64(n)+1024)
		unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	}
	f, err := listenFleet(n, ports, flows, nodeAP, fp, period)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 1
	}
	go f.serve()
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Println(f.answered.Load(), f.asked.Load(), int64(rusage.CPU()))
	}
	return 0
}

// A fleetSockets is the fake fleet's side: every peer's socket, the
// answers and queries they send, ready-made (serve allocates nothing).
type fleetSockets struct {
	fds      []int
	peerOf   []int32      // fd -> peer index
	answers  [][][][]byte // [peer][version-1][port index]
	queries  [][]byte     // [peer]
	ports    int
	epfd     int
	period   time.Duration
	answered atomic.Uint64
	asked    atomic.Uint64
}

// FleetAddr is fake peer i's address: 127.1.0.0 + i + 1.
func FleetAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 1, byte((i + 1) >> 8), byte(i + 1)})
}

// fleetGID is fake peer i's GID (an IPv4-mapped one of its address).
func fleetGID(i int) [16]byte {
	a := FleetAddr(i).As4()
	return [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: a[1], 14: a[2], 15: a[3]}
}

func fleetQPN(i int) uint32 { return uint32(0x1000 + i) }

func listenFleet(n, ports, flows int, node netip.AddrPort, fp []byte, period time.Duration) (*fleetSockets, error) {
	f := &fleetSockets{ports: ports, period: period}
	var err error
	if f.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, err
	}
	nodeSA := &unix.SockaddrInet4{Port: int(node.Port()), Addr: node.Addr().As4()}
	fpExt := wire.WithFingerprint(fp)
	for i := range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("fake peer %d: %w (raise the open files limit)", i, err)
		}
		f.fds = append(f.fds, fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(node.Port()), Addr: FleetAddr(i).As4()}); err != nil {
			return nil, fmt.Errorf("fake peer %d: bind %v: %w", i, FleetAddr(i), err)
		}
		if err := unix.Connect(fd, nodeSA); err != nil {
			return nil, err
		}
		if err := unix.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return nil, err
		}
		for len(f.peerOf) <= fd {
			f.peerOf = append(f.peerOf, -1)
		}
		f.peerOf[fd] = int32(i)
		var byVer [][][]byte
		for _, ver := range []uint8{wire.Version1, wire.Version2} {
			var byIdx [][]byte
			for idx := range ports {
				m := wire.Message{Version: ver, Type: wire.TypeAnswer, Index: uint8(idx), Count: uint8(ports),
					QPN: fleetQPN(i) + uint32(idx)<<16, QKey: 0x4321, GID: fleetGID(i), NodeID: uint64(0xf000 + i)}
				if ver == wire.Version2 {
					m.Ext = []wire.Ext{{Type: wire.ExtFingerprint, Value: fp}}
					if flows > 1 {
						m.Ext = append(m.Ext, wire.FlowsAcceptedExt(flows-1))
					}
				}
				b, err := m.Append(nil, nil)
				if err != nil {
					return nil, err
				}
				byIdx = append(byIdx, b)
			}
			byVer = append(byVer, byIdx)
		}
		f.answers = append(f.answers, byVer)
		q := wire.Message{Version: wire.Version2, Type: wire.TypeQuery, Nonce: uint64(i + 1), Count: uint8(ports),
			QPN: fleetQPN(i), QKey: 0x4321, GID: fleetGID(i), NodeID: uint64(0xf000 + i), Ext: fpExt}
		b, err := q.Append(nil, nil)
		if err != nil {
			return nil, err
		}
		f.queries = append(f.queries, b)
	}
	return f, nil
}

// fleetPoll is how often the fake fleet looks at its sockets. It polls
// rather than sleeping in epoll_wait: a datagram to a process asleep on
// its sockets makes the sender's system call wake it, and on a VM that
// cross-process wakeup costs the sender (the node) up to a millisecond per
// message, which a datagram to a remote peer does not.
const fleetPoll = 20 * time.Millisecond

// serve answers the node's queries and sends the peers' own, until the
// process exits.
func (f *fleetSockets) serve() {
	runtime.LockOSThread()
	events := make([]unix.EpollEvent, 256)
	buf := make([]byte, wire.MaxSize+1)
	start := time.Now()
	next := 0
	for {
		k, err := unix.EpollWait(f.epfd, events, 0)
		if err != nil && err != unix.EINTR {
			panic(err)
		}
		for _, e := range events[:max(k, 0)] {
			fd := int(e.Fd)
			i := f.peerOf[fd]
			for {
				n, err := unix.Read(fd, buf)
				if err != nil {
					break
				}
				b := buf[:n]
				if n < wire.Size || string(b[:4]) != "RDPC" || b[5] != wire.TypeQuery || (b[4] != wire.Version1 && b[4] != wire.Version2) {
					continue // the node's answers to our queries, or not ours
				}
				a := f.answers[i][b[4]-1][int(b[16])%f.ports]
				copy(a[8:16], b[8:16])
				if _, err := unix.Write(fd, a); err == nil {
					f.answered.Add(1)
				}
			}
		}
		if f.period > 0 {
			// Each peer asks the node once per period, spread evenly.
			due := int(int64(time.Since(start)) * int64(len(f.fds)) / int64(f.period))
			for ; next < due; next++ {
				i := next % len(f.fds)
				q := f.queries[i]
				binary.BigEndian.PutUint64(q[8:], uint64(next+1))
				if _, err := unix.Write(f.fds[i], q); err == nil {
					f.asked.Add(1)
				}
			}
		}
		if k < len(events) {
			time.Sleep(fleetPoll)
		}
	}
}
