package artifacts

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/persistence"
)

// manifestFile records a merged folder's files; it is the service's own and
// is not offered for download.
const manifestFile = "wts-manifest.json"

// Downloadable lists the files of tenant t's artifact in format, to sign
// links to.
func Downloadable(n *protocol.Node, t persistence.Tenant, artifactID, format string) (*persistence.Artifact, []persistence.ArtifactFile, error) {
	a, err := GetArtifact(n.Store, t, artifactID)
	if err != nil {
		return nil, nil, err
	}
	if a.Status != states.Available {
		return nil, nil, protocol.Refuse(protocol.CodeArtifactRetired, "artifact %s was retired with its run %s", a.ID, a.RunID)
	}
	files, _, err := filesOf(n, a, format)
	return a, files, err
}

// FilePath is where file name of artifact id in format lives, for a signed
// link (whose signature already shows the holder may have it). Only names in
// the format's manifest are served, so no path from the link reaches the file
// system.
func FilePath(n *protocol.Node, artifactID, format, name string) (string, error) {
	a, err := Artifact(n.Store, artifactID)
	if err != nil {
		return "", err
	}
	if a == nil || a.Status != states.Available {
		return "", protocol.NotFound("artifact", artifactID)
	}
	files, dir, err := filesOf(n, a, format)
	if err != nil {
		return "", err
	}
	if !slices.ContainsFunc(files, func(f persistence.ArtifactFile) bool { return f.Path == name }) {
		return "", protocol.NotFound("file", name)
	}
	return filepath.Join(dir, name), nil
}

// filesOf is the manifest of an artifact in format and the folder it lists.
func filesOf(n *protocol.Node, a *persistence.Artifact, format string) ([]persistence.ArtifactFile, string, error) {
	switch format {
	case protocol.FormatPEFT:
		return a.Files, n.Volume.ArtifactDir(a.RunID, a.ID), nil
	case protocol.FormatMerged:
		dir := n.Volume.MergedDir(a.RunID, a.ID)
		files, err := merged(n, a, dir)
		return files, dir, err
	}
	return nil, "", protocol.Refuse(protocol.CodeValidation, "format: must be %s or %s", protocol.FormatPEFT, protocol.FormatMerged)
}

// merged returns the manifest of the artifact's merged model folder,
// building the folder the first time it is asked for. The build is
// tensor-heavy (a whole base model in memory, twice) so it runs on the
// trainer's executor, in the artifact owner's turn, with its memory taken
// from the node's budget; the request waits for it.
func merged(n *protocol.Node, a *persistence.Artifact, dir string) ([]persistence.ArtifactFile, error) {
	if files, ok, err := readManifest(dir); ok || err != nil {
		return files, err
	}
	var run persistence.Run
	if err := n.Store.View(func(tx persistence.Tx) error {
		_, err := tx.Get(persistence.Runs, []byte(a.RunID), &run)
		return err
	}); err != nil {
		return nil, err
	}
	entry, ok := n.Registry.Catalog().Lookup(run.BaseModel)
	if !ok {
		return nil, protocol.Refuse(protocol.CodeModelUnavailable, "base model %s of artifact %s is no longer in the catalog", run.BaseModel, a.ID)
	}
	need := executor.MergeBytes(entry.Config)
	if err := n.Memory.Fits("merging the artifact into its base model", need); err != nil {
		return nil, err
	}
	var files []persistence.ArtifactFile
	err := n.Trainer.WithMemory(a.Tenant.Org, "merge/"+a.ID, need, func() error {
		var ok bool
		var err error
		if files, ok, err = readManifest(dir); ok || err != nil {
			return err // an earlier request built it meanwhile
		}
		files, err = mergeInto(dir, entry.Dir, n.Volume.ArtifactDir(a.RunID, a.ID))
		if err != nil {
			return fmt.Errorf("merge artifact %s: %w", a.ID, err)
		}
		return nil
	})
	return files, err
}

// readManifest reads a merged folder's manifest; ok is false when the
// folder has not been built.
func readManifest(dir string) (files []persistence.ArtifactFile, ok bool, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(raw, &files); err != nil {
		return nil, false, fmt.Errorf("manifest of %s: %w", dir, err)
	}
	return files, true, nil
}

// mergeInto writes the base model in baseDir with the adapter in
// adapterDir folded in to dir, with its manifest, and returns the manifest.
func mergeInto(dir, baseDir, adapterDir string) ([]persistence.ArtifactFile, error) {
	w, err := model.Load(baseDir)
	if err != nil {
		return nil, err
	}
	ad, err := lora.LoadPEFT(adapterDir, w.Cfg)
	if err != nil {
		return nil, err
	}
	var files []persistence.ArtifactFile
	err = persistence.WriteDir(dir, func(tmp string) error {
		if err := lora.Merge(w, ad).Save(tmp, safetensors.F32); err != nil {
			return err
		}
		var err error
		if files, _, _, err = persistence.Manifest(tmp); err != nil {
			return err
		}
		raw, _ := json.Marshal(files)
		return os.WriteFile(filepath.Join(tmp, manifestFile), raw, 0o600)
	})
	return files, err
}
