package persistence

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Volume is the node's file storage under its data folder, in two parts:
//
//   - the training volume, runs/<run id>/: trainer snapshots and the state a
//     run started from, which only the run's own execution reads;
//   - the artifact volume, artifacts/<run id>/: checkpoints and exported
//     artifacts, the run's artifact prefix, which callers reference and
//     download and which retire removes.
//
// Retiring a run never touches its training volume.
type Volume struct{ root string }

// NewVolume is the volume under the data folder dataDir.
func NewVolume(dataDir string) Volume { return Volume{dataDir} }

// SnapshotDir is where the trainer snapshot after operation seq lives.
func (v Volume) SnapshotDir(runID string, seq int64) string {
	return filepath.Join(v.root, "runs", runID, "snapshots", strconv.FormatInt(seq, 10))
}

// InitialDir holds the state a run created from a checkpoint starts from:
// the checkpoint's files linked in, so that retiring the checkpoint's run
// cannot take them from under this one.
func (v Volume) InitialDir(runID string) string {
	return filepath.Join(v.root, "runs", runID, "initial")
}

// WeightsDir holds the adapter of a run's weight version, saved for its
// sampler (save_weights_for_sampler, or a run-scoped sample).
func (v Volume) WeightsDir(runID string, version int64) string {
	return filepath.Join(v.root, "runs", runID, "weights", strconv.FormatInt(version, 10))
}

// ArtifactPrefix is a run's folder on the artifact volume.
func (v Volume) ArtifactPrefix(runID string) string {
	return filepath.Join(v.root, "artifacts", runID)
}

// CheckpointDir is the folder of a checkpoint.
func (v Volume) CheckpointDir(runID, id string) string {
	return filepath.Join(v.ArtifactPrefix(runID), "checkpoints", id)
}

// ArtifactDir is the folder of an exported artifact.
func (v Volume) ArtifactDir(runID, id string) string {
	return filepath.Join(v.ArtifactPrefix(runID), "exports", id)
}

// MergedDir holds an artifact's adapter folded into its base model: an HF
// model folder, made on the first request for it.
func (v Volume) MergedDir(runID, id string) string {
	return filepath.Join(v.ArtifactPrefix(runID), "merged", id)
}

// WriteDir creates dir whole or not at all: fill writes into a temporary
// folder beside it, whose files are fsynced before it is renamed into
// place. An existing dir is replaced (re-running the operation that made
// it makes the same folder).
func WriteDir(dir string, fill func(tmp string) error) error {
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// WriteFile writes data to path whole or not at all: through a temporary
// file beside it, fsynced and renamed into place, its folder (made if
// missing) fsynced after.
func WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncFolder(dir)
}

// LinkDir fills dst (through WriteDir) with the files of src: hard links
// where the file system allows, copies where it does not.
func LinkDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	return WriteDir(dst, func(tmp string) error {
		for _, en := range entries {
			if en.IsDir() {
				continue
			}
			from, to := filepath.Join(src, en.Name()), filepath.Join(tmp, en.Name())
			if os.Link(from, to) == nil {
				continue
			}
			if err := copyFile(from, to); err != nil {
				return err
			}
		}
		return nil
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// syncDir fsyncs a folder's files and the folder itself.
func syncDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if en.IsDir() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, en.Name()))
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return syncFolder(dir)
}

// syncFolder makes the folder's entries (new and renamed files) durable.
func syncFolder(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Manifest lists a folder's files with their sizes and SHA-256 digests, by
// name, and gives the folder's checksum: the SHA-256 of the lines
// "<sha256>  <path>\n" in that order (what sha256sum prints), so that a
// downloaded copy can be checked with standard tools.
func Manifest(dir string) (files []ArtifactFile, checksum string, size int64, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", 0, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	sum := sha256.New()
	for _, en := range entries {
		if en.IsDir() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, en.Name()))
		if err != nil {
			return nil, "", 0, err
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, "", 0, fmt.Errorf("digest %s: %w", en.Name(), err)
		}
		file := ArtifactFile{Path: en.Name(), SizeBytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}
		fmt.Fprintf(sum, "%s  %s\n", file.SHA256, file.Path)
		files = append(files, file)
		size += n
	}
	return files, "sha256:" + hex.EncodeToString(sum.Sum(nil)), size, nil
}
