// Package uevent reads kernel object (kobject) uevents from a
// NETLINK_KOBJECT_UEVENT socket.
//
// rdmad uses uevents only as "look again at this device" hints for the
// subsystems it cares about (net and infiniband): a VF that is hot-plugged or
// a driver that is reloaded loses its RDMA settings, and the reconciler must
// reapply them. The package reads the kernel's multicast group directly
// instead of udevd's, so it does not depend on udevd running or on its rule
// processing having finished.
package uevent

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// An Event is one kernel uevent.
type Event struct {
	Action    string            // "add", "remove", "change", "move", "online", "offline", "bind", "unbind"
	DevPath   string            // sysfs path below /sys, e.g. "/devices/virtual/net/veth0"
	Subsystem string            // SUBSYSTEM, e.g. "net" or "infiniband"
	Seqnum    uint64            // SEQNUM, increasing per boot
	Env       map[string]string // all KEY=VALUE pairs, including ACTION, DEVPATH, SUBSYSTEM, SEQNUM
}

// libudevMagic starts messages that udevd (or anything using libudev)
// broadcasts on netlink group 2. They are not kernel events.
var libudevMagic = []byte("libudev\x00")

// errLibudev marks a message from libudev; Receive skips it silently.
var errLibudev = errors.New("message from libudev, not the kernel")

// Parse decodes one kernel uevent message, "ACTION@DEVPATH\0KEY=VALUE\0...".
// It returns an error for messages that are not in this form, including
// libudev messages.
func Parse(b []byte) (Event, error) {
	if bytes.HasPrefix(b, libudevMagic) {
		return Event{}, errLibudev
	}
	fields := bytes.Split(b, []byte{0})
	header := string(fields[0])
	action, devpath, ok := strings.Cut(header, "@")
	if !ok || action == "" || devpath == "" {
		return Event{}, fmt.Errorf("uevent: parse: header %q is not ACTION@DEVPATH", truncate(header))
	}
	ev := Event{Action: action, DevPath: devpath, Env: make(map[string]string, len(fields))}
	for _, f := range fields[1:] {
		if len(f) == 0 {
			continue // the message ends with NUL; tolerate empty fields
		}
		k, v, ok := bytes.Cut(f, []byte("="))
		if !ok || len(k) == 0 {
			return Event{}, fmt.Errorf("uevent: parse %s: field %q is not KEY=VALUE", devpath, truncate(string(f)))
		}
		ev.Env[string(k)] = string(v)
	}
	if a, ok := ev.Env["ACTION"]; ok && a != action {
		return Event{}, fmt.Errorf("uevent: parse %s: ACTION=%q disagrees with header action %q", devpath, truncate(a), action)
	}
	ev.Subsystem = ev.Env["SUBSYSTEM"]
	if s, ok := ev.Env["SEQNUM"]; ok {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("uevent: parse %s: SEQNUM %q: %w", devpath, truncate(s), err)
		}
		ev.Seqnum = n
	}
	return ev, nil
}

// truncate keeps error messages short when the input is garbage.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
