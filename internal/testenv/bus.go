package testenv

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// busReplies are the rules both policies share: signals, replies to what
// was asked, and receiving.
const busReplies = `
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>`

// SystemBusPolicy is the default context of /usr/share/dbus-1/system.conf
// (Debian bookworm): anyone may connect, nobody may own names or send
// method calls unless a service's policy file punches a hole.
const SystemBusPolicy = `
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>` + busReplies + `
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus" send_member="UpdateActivationEnvironment"/>
  </policy>`

// OpenBusPolicy lets anyone own and call anything: for tests of a protocol
// rather than of a policy.
const OpenBusPolicy = `
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>` + busReplies + `
  </policy>`

// WriteBusConfig writes dir/bus.conf, the configuration of a dbus-daemon
// of type system listening on dir/bus whose rules are policy (the XML
// inside <busconfig>), and returns its path.
func WriteBusConfig(tb testing.TB, dir, policy string) string {
	tb.Helper()
	conf := filepath.Join(dir, "bus.conf")
	doc := `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=` + filepath.Join(dir, "bus") + `</listen>
  <auth>EXTERNAL</auth>` + policy + `
</busconfig>
`
	if err := os.WriteFile(conf, []byte(doc), 0o644); err != nil {
		tb.Fatal(err)
	}
	return conf
}

// SystemBus runs a private dbus-daemon of type system whose configuration
// is policy (the XML inside <busconfig>, e.g. SystemBusPolicy and an
// <include> of a service's file), stops it at the end of tb, and points
// DBUS_SYSTEM_BUS_ADDRESS at it. A missing dbus-daemon skips tb (fails it
// when Strict).
func SystemBus(tb testing.TB, policy string) {
	tb.Helper()
	Tool(tb, "dbus-daemon", "apt-get install dbus-daemon: the test runs a private bus")
	conf := WriteBusConfig(tb, tb.TempDir(), policy)
	cmd := exec.Command("dbus-daemon", "--config-file="+conf, "--print-address", "--nofork")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start dbus-daemon: %v", err)
	}
	done := make(chan struct{})
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	go func() {
		_, _ = io.Copy(io.Discard, r)
		_ = cmd.Wait()
		close(done)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	if err != nil {
		tb.Fatalf("dbus-daemon --config-file=%s printed no address: %v", conf, err)
	}
	tb.Setenv("DBUS_SYSTEM_BUS_ADDRESS", strings.Split(strings.TrimSpace(line), ",")[0])
}
