package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/rdmad/rdmad/internal/safefile"
)

// SavedName is the file, in rdmad's state directory, that holds a copy of
// the last configuration rdmad accepted. A start whose configuration has
// errors runs on it (rdmad(8)).
const SavedName = "accepted-config.json"

// MaxSavedSize bounds the saved copy: what is read at start, like every
// configuration file, is read with a bound. A configuration larger than
// this (many big drop-ins) is not saved, and SaveCopy says so.
const MaxSavedSize = 4 * MaxFileSize

// savedFormat is the version of the copy's layout; a copy of another
// version is not used.
const savedFormat = 1

// saved is the copy's layout: the accepted files as they were read, main
// file first, so that loading it is the same merge and validation as
// loading the files themselves.
type saved struct {
	Format int         `json:"format"`
	Files  []savedFile `json:"files"`
}

type savedFile struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
}

// SavedPath is the copy's path in the state directory dir.
func SavedPath(dir string) string { return filepath.Join(dir, SavedName) }

// SaveCopy writes the files cfg was loaded from to path, atomically and
// root-only (mode 0600; nothing is written through a symlink at path).
func SaveCopy(cfg *Config, path string) error {
	if len(cfg.raw) != len(cfg.Files) || len(cfg.Files) == 0 {
		return fmt.Errorf("config: save a copy at %s: the configuration was not loaded from files", path)
	}
	s := saved{Format: savedFormat, Files: make([]savedFile, len(cfg.Files))}
	for i, f := range cfg.Files {
		s.Files[i] = savedFile{Path: f, Data: cfg.raw[i]}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("config: save a copy at %s: %w", path, err)
	}
	if len(b) > MaxSavedSize {
		return fmt.Errorf("config: save a copy at %s: the configuration takes %d bytes, more than the %d a copy may hold; a start with errors will find no copy", path, len(b), MaxSavedSize)
	}
	// Every reload accepts: the copy is rewritten (and synced) only when
	// it changes.
	if old, _, err := safefile.Read(path, safefile.Options{Max: MaxSavedSize, NoFollow: true}); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := safefile.WriteAtomic(path, b, 0o600); err != nil {
		return fmt.Errorf("config: save a copy: %w", err)
	}
	return nil
}

// LoadSaved loads the copy at path that SaveCopy wrote: the same merge and
// validation as Load, over the files as they were when rdmad accepted
// them. The copy is read like a configuration file (bounded, regular files
// only) and not through a symlink. A missing copy is an error that wraps
// fs.ErrNotExist; a copy that no longer loads (rdmad was upgraded and a
// key it held is gone, a group it names was removed) is an error like a
// bad file's, and is not used.
func LoadSaved(path string) (*Config, error) {
	b, _, err := safefile.Read(path, safefile.Options{Max: MaxSavedSize, NoFollow: true})
	if err != nil {
		return nil, fmt.Errorf("config: read the saved copy: %w", err)
	}
	var s saved
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("config: saved copy %s is damaged: %w", path, err)
	}
	if s.Format != savedFormat || len(s.Files) == 0 {
		return nil, fmt.Errorf("config: saved copy %s has format %d with %d files; this rdmad reads format %d", path, s.Format, len(s.Files), savedFormat)
	}
	files := make([]string, len(s.Files))
	data := make(map[string][]byte, len(s.Files))
	for i, f := range s.Files {
		files[i] = f.Path
		data[f.Path] = f.Data
	}
	return load(files, func(f string) ([]byte, error) { return data[f], nil })
}
