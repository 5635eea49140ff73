// Command npd-custom-plugin runs node-problem-detector's own custom plugin
// monitor (k8s.io/node-problem-detector/pkg/custompluginmonitor, the code
// behind NPD's --config.custom-plugin-monitor: it runs the rules, reads
// their exit code and output and decides the node conditions) on one
// config file, and prints every status it sends to NPD's exporters as a
// JSON line, until it is killed. packaging/npd_real_test.go runs it on
// rdmad's plugin config (packaging/npd/rdmad-health.json).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"k8s.io/node-problem-detector/pkg/custompluginmonitor"
)

func main() {
	config := flag.String("config", "", "custom plugin monitor config file")
	flag.Parse()
	m := custompluginmonitor.NewCustomPluginMonitorOrDie(*config)
	ch, err := m.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	for st := range ch {
		if err := enc.Encode(st); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
