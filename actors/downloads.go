package actors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/persistence"
)

// Download formats of an artifact.
const (
	FormatPEFT   = "peft"   // the artifact's own files
	FormatMerged = "merged" // the base model with the adapter folded in, an HF model folder
)

// CodeArtifactRetired refuses links to an artifact whose files are gone.
const CodeArtifactRetired = "artifact_retired"

// manifestFile records a merged folder's files; it is the service's own and
// is not offered for download.
const manifestFile = "wts-manifest.json"

// Downloadable lists the files of tenant t's artifact in format, to sign
// links to.
func (s *System) Downloadable(t persistence.Tenant, artifactID, format string) (*persistence.Artifact, []persistence.ArtifactFile, error) {
	a, err := s.GetArtifact(t, artifactID)
	if err != nil {
		return nil, nil, err
	}
	if a.Status != states.Available {
		return nil, nil, refuse(CodeArtifactRetired, "artifact %s was retired with its run %s", a.ID, a.RunID)
	}
	files, _, err := s.files(a, format)
	return a, files, err
}

// FilePath is where file name of artifact id in format lives, for a signed
// link (whose signature already shows the holder may have it). Only names in
// the format's manifest are served, so no path from the link reaches the file
// system.
func (s *System) FilePath(artifactID, format, name string) (string, error) {
	a, err := s.artifact(artifactID)
	if err != nil {
		return "", err
	}
	if a == nil || a.Status != states.Available {
		return "", notFound("artifact", artifactID)
	}
	files, dir, err := s.files(a, format)
	if err != nil {
		return "", err
	}
	if !slices.ContainsFunc(files, func(f persistence.ArtifactFile) bool { return f.Path == name }) {
		return "", notFound("file", name)
	}
	return filepath.Join(dir, name), nil
}

// files is the manifest of an artifact in format and the folder it lists.
func (s *System) files(a *persistence.Artifact, format string) ([]persistence.ArtifactFile, string, error) {
	switch format {
	case FormatPEFT:
		return a.Files, s.volume.ArtifactDir(a.RunID, a.ID), nil
	case FormatMerged:
		dir := s.volume.MergedDir(a.RunID, a.ID)
		files, err := s.merged(a, dir)
		return files, dir, err
	}
	return nil, "", refuse(CodeValidation, "format: must be %s or %s", FormatPEFT, FormatMerged)
}

// merged returns the manifest of the artifact's merged model folder,
// building the folder the first time it is asked for. The build is
// tensor-heavy (a whole base model in memory, twice) so it runs on the
// trainer's executor, in the artifact owner's turn, with its memory taken
// from the node's budget; the request waits for it.
func (s *System) merged(a *persistence.Artifact, dir string) ([]persistence.ArtifactFile, error) {
	if files, ok, err := readManifest(dir); ok || err != nil {
		return files, err
	}
	var run persistence.Run
	if err := s.store.View(func(tx persistence.Tx) error {
		_, err := tx.Get(persistence.Runs, []byte(a.RunID), &run)
		return err
	}); err != nil {
		return nil, err
	}
	entry, ok := s.cfg.Registry.Catalog().Lookup(run.BaseModel)
	if !ok {
		return nil, refuse(CodeModelUnavailable, "base model %s of artifact %s is no longer in the catalog", run.BaseModel, a.ID)
	}
	need := executor.MergeBytes(entry.Config)
	if err := s.mem.Fits("merging the artifact into its base model", need); err != nil {
		return nil, err
	}
	var files []persistence.ArtifactFile
	err := s.exec.WithMemory(a.Tenant.Org, "merge/"+a.ID, need, func() error {
		var ok bool
		var err error
		if files, ok, err = readManifest(dir); ok || err != nil {
			return err // an earlier request built it meanwhile
		}
		files, err = mergeInto(dir, entry.Dir, s.volume.ArtifactDir(a.RunID, a.ID))
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
