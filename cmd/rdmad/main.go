// Command rdmad is the RDMA node agent. See rdmad(8).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rdmad/rdmad/daemon"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/policy/ecn"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rdmad:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("rdmad", flag.ContinueOnError)
	cfgPath := fs.String("config", config.DefaultPath, "main configuration `file`; drop-ins are read from rdmad.d/ next to it")
	socket := fs.String("socket", "", "Unix socket `path` of the API (overrides [daemon] socket)")
	sysfs := fs.String("sysfs-root", "/", "root `dir` under which sys/class/infiniband is read (for tests)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	writeECN := fs.String("write-ecn", "", "write the DCQCN settings rdmad left in "+ecn.WantDir+"/`NETDEV` to that netdev's ecn sysfs files and exit: what rdmad-ecn@NETDEV.service runs (see rdmad(8))")
	checkConfig := fs.Bool("check-config", false, "check the configuration (the FILE argument, else --config) and its drop-ins, print each error as file:line and exit: 0 valid, 1 invalid")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: rdmad [flags]\n       rdmad --check-config [FILE]\n       rdmad --write-ecn NETDEV\n\nrdmad keeps a node's RDMA settings as declared, proves its ports work, and reports it.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// The flag package writes both the help and its errors to one
	// output. The help asked for is the answer and goes to stdout (rdmad
	// --help | less); a mistake goes to stderr with a pointer to the help,
	// not the whole table.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return nil
		}
		fmt.Fprintf(os.Stderr, "rdmad: %v (see rdmad --help)\n", err)
		os.Exit(2)
	}
	if *checkConfig {
		path := *cfgPath
		switch fs.NArg() {
		case 0:
		case 1:
			path = fs.Arg(0)
		default:
			fmt.Fprintf(os.Stderr, "rdmad: --check-config takes one file, not %d arguments\n", fs.NArg())
			os.Exit(2)
		}
		os.Exit(daemon.CheckConfig(path, os.Stderr))
	}
	writeSet := false
	fs.Visit(func(f *flag.Flag) { writeSet = writeSet || f.Name == "write-ecn" })
	if writeSet {
		// An empty name is refused by the writer, never taken for
		// "start the daemon".
		if fs.NArg() > 0 {
			fmt.Fprintf(os.Stderr, "rdmad: unexpected argument %q after --write-ecn\n", fs.Arg(0))
			os.Exit(2)
		}
		// Run by rdmad-ecn@.service, whose journal shows what it did.
		msg, err := ecn.New(ecn.Options{Root: *sysfs}).WriteWanted(ecn.WantDir, *writeECN)
		if err != nil {
			return err
		}
		fmt.Println(msg)
		return nil
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rdmad: unexpected argument %q; rdmad takes only flags, and a file after --check-config (see rdmad --help)\n", fs.Arg(0))
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println("rdmad", version)
		return nil
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := daemon.Run(ctx, daemon.Options{
		ConfigPath:     *cfgPath,
		ConfigRequired: explicit,
		Socket:         *socket,
		SysfsRoot:      *sysfs,
		Version:        version,
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	// A configuration with errors and none accepted before: EX_CONFIG,
	// which rdmad.service does not restart (RestartPreventExitStatus=).
	var ce *daemon.ConfigError
	if errors.As(err, &ce) {
		fmt.Fprintln(os.Stderr, "rdmad:", err)
		os.Exit(daemon.ExitConfig)
	}
	return err
}
