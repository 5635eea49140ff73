package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/rdmad/rdmad/daemon/config"
)

// watchConfig sends on changed (capacity 1, never blocking) after a burst of
// changes to the main file or to *.toml drop-ins has been quiet for settle.
// It watches the directories, not the files, so that editors that save by
// writing a new file and renaming it over the old one are seen, and so that
// a drop-in directory created later is picked up. The watcher runs as one
// of the daemon's parts (supervise.go) until Run's context ends.
func (d *Daemon) watchConfig(path string, settle time.Duration, changed chan<- struct{}) error {
	log := d.log
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	dropDir := filepath.Join(dir, config.DropInDir)
	if err := w.Add(dir); err != nil {
		w.Close()
		return err
	}
	_ = w.Add(dropDir) // may not exist yet; see the Create case below

	d.parts.Go(func(ctx context.Context) {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				// An overflow loses events: treat it as a change.
				log.Warn("config watcher", "err", err)
				fire = time.After(settle)
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Name == dropDir && ev.Has(fsnotify.Create) {
					_ = w.Add(dropDir)
				}
				if !relevant(ev.Name, path, dropDir) {
					continue
				}
				if timer == nil {
					timer = time.NewTimer(settle)
				} else {
					timer.Reset(settle)
				}
				fire = timer.C
			case <-fire:
				fire = nil
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	})
	return nil
}

func relevant(name, mainFile, dropDir string) bool {
	if name == mainFile || name == dropDir {
		return true
	}
	return filepath.Dir(name) == dropDir && strings.HasSuffix(name, ".toml")
}
