package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The real nodes' images, with no registry (docs/src/testing/real-nodes.md):
// each is an OCI image layout tar of one uncompressed layer, made here from
// files of this host and imported into every node's containerd. The tars
// are cached beside the components (target/kube/images) and made again
// when a file they are made from is newer.
const (
	pauseImage  = "localhost/tfjob-federator/pause:3"
	pythonImage = "localhost/tfjob-federator/python:3"
)

// imageSpec is what an image holds: host paths copied at the same path
// (with every symlink on the way), files copied to a name of their own at
// the image's root, and how it starts.
type imageSpec struct {
	name       string
	paths      []string
	files      map[string]string // name in the image → host path
	entrypoint []string
	cmd        []string
	env        []string
}

// hostPython is the interpreter of the python image: Debian's, whose
// standard library lives in one folder.
const hostPython = "/usr/bin/python3.11"

func imageSpecs(bin string) ([]imageSpec, error) {
	python, err := pythonPaths()
	if err != nil {
		return nil, fmt.Errorf("the python image: %w", err)
	}
	return []imageSpec{
		{name: pauseImage, files: map[string]string{"pause": filepath.Join(bin, "pause")}, entrypoint: []string{"/pause"}},
		{name: pythonImage, paths: python, cmd: []string{"python3"}, env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
		corednsImageSpec(bin),
	}, nil
}

// pythonPaths: the interpreter, its standard library (without its own
// test suite) and every shared library it or its extension modules load.
func pythonPaths() ([]string, error) {
	if _, err := os.Stat(hostPython); err != nil {
		return nil, fmt.Errorf("%s is missing (Debian's python3.11 package)", hostPython)
	}
	paths := []string{hostPython, "/usr/bin/python3", "/usr/lib/python3.11"}
	loaded := []string{hostPython}
	modules, _ := filepath.Glob("/usr/lib/python3.11/lib-dynload/*.so")
	loaded = append(loaded, modules...)
	out, err := exec.Command("ldd", loaded...).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, field := range strings.Fields(line) {
			if strings.HasPrefix(field, "/") && !strings.HasSuffix(field, ":") {
				paths = append(paths, field)
			}
		}
	}
	return paths, nil
}

// imageTar is the cached layout tar of spec, made if missing or stale.
func imageTar(cache string, spec imageSpec) (string, error) {
	file := filepath.Join(cache, strings.NewReplacer("/", "_", ":", "_").Replace(spec.name)+".tar")
	sources := spec.paths
	for _, host := range spec.files {
		sources = append(sources, host)
	}
	if info, err := os.Stat(file); err == nil && !newerThan(sources, info.ModTime()) {
		return file, nil
	}
	started := time.Now()
	layer, err := layerOf(spec)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", spec.name, err)
	}
	layout, err := ociLayout(spec, layer)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	partial := file + ".partial"
	if err := os.WriteFile(partial, layout, 0o644); err != nil {
		return "", err
	}
	logf("image %s: %d MiB, made in %.1fs", spec.name, len(layout)>>20, time.Since(started).Seconds())
	return file, os.Rename(partial, file)
}

// newerThan: a regular file among paths (a folder's, walked) was changed
// after t.
func newerThan(paths []string, t time.Time) bool {
	for _, path := range paths {
		newer := false
		_ = filepath.Walk(path, func(_ string, info os.FileInfo, err error) error {
			if err == nil && info.ModTime().After(t) {
				newer = true
				return filepath.SkipAll
			}
			return nil
		})
		if newer {
			return true
		}
	}
	return false
}

// layerBuilder writes a tar of host paths under their own names, each entry
// once, with fixed times so that the same files give the same digest.
type layerBuilder struct {
	out   *tar.Writer
	added map[string]bool
}

func layerOf(spec imageSpec) ([]byte, error) {
	var buf bytes.Buffer
	b := &layerBuilder{out: tar.NewWriter(&buf), added: map[string]bool{}}
	if err := b.header(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}); err != nil {
		return nil, err
	}
	for _, path := range spec.paths {
		if err := b.add(path); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(spec.files))
	for name := range spec.files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := b.file(name, spec.files[name]); err != nil {
			return nil, err
		}
	}
	if err := b.out.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (b *layerBuilder) header(h *tar.Header) error {
	h.ModTime, h.Uid, h.Gid, h.Format = time.Unix(0, 0), 0, 0, tar.FormatPAX
	return b.out.WriteHeader(h)
}

// add writes path: its parent folders first (a symlinked one as the
// symlink and its target), then the path itself, a folder with all it holds.
func (b *layerBuilder) add(path string) error {
	path = filepath.Clean(path)
	if path == "/" || b.added[path] {
		return nil
	}
	if err := b.add(filepath.Dir(path)); err != nil {
		return err
	}
	b.added[path] = true
	name := strings.TrimPrefix(path, "/")
	info, err := os.Lstat(path)
	if err != nil {
		return err
	}
	switch {
	case info.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		if err := b.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}); err != nil {
			return err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		return b.add(target)
	case info.IsDir():
		if err := b.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(info.Mode().Perm())}); err != nil {
			return err
		}
		if strings.HasPrefix(path, "/usr/lib/python3.11") {
			entries, err := os.ReadDir(path)
			if err != nil {
				return err
			}
			for _, entry := range entries {
				if path == "/usr/lib/python3.11" && entry.Name() == "test" {
					continue // the interpreter's own test suite: a third of the folder
				}
				if err := b.add(filepath.Join(path, entry.Name())); err != nil {
					return err
				}
			}
		}
		return nil
	case info.Mode().IsRegular():
		return b.file(name, path)
	default:
		return nil // sockets, devices: no image needs them
	}
}

// file writes the regular file at host path as name.
func (b *layerBuilder) file(name, host string) error {
	info, err := os.Stat(host)
	if err != nil {
		return err
	}
	content, err := os.ReadFile(host)
	if err != nil {
		return err
	}
	if err := b.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(info.Mode().Perm()), Size: int64(len(content))}); err != nil {
		return err
	}
	_, err = b.out.Write(content)
	return err
}

// ociLayout is an OCI image layout tar of one image: index.json naming it
// (the annotation `ctr images import` takes the name from), its manifest,
// config and layer.
func ociLayout(spec imageSpec, layer []byte) ([]byte, error) {
	blobs := map[string][]byte{}
	blob := func(content []byte) map[string]any {
		sum := sha256.Sum256(content)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		blobs[digest] = content
		return map[string]any{"digest": digest, "size": len(content)}
	}
	layerRef := blob(layer)
	layerRef["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": spec.entrypoint, "Cmd": spec.cmd, "Env": spec.env},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerRef["digest"].(string)}},
	})
	if err != nil {
		return nil, err
	}
	configRef := blob(config)
	configRef["mediaType"] = "application/vnd.oci.image.config.v1+json"
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": configRef, "layers": []any{layerRef},
	})
	if err != nil {
		return nil, err
	}
	manifestRef := blob(manifest)
	manifestRef["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
	manifestRef["annotations"] = map[string]string{"io.containerd.image.name": spec.name}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{manifestRef}})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	out := tar.NewWriter(&buf)
	file := func(name string, content []byte) error {
		if err := out.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := io.Copy(out, bytes.NewReader(content))
		return err
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}
	if err := file("index.json", index); err != nil {
		return nil, err
	}
	digests := make([]string, 0, len(blobs))
	for digest := range blobs {
		digests = append(digests, digest)
	}
	sort.Strings(digests)
	for _, digest := range digests {
		if err := file("blobs/sha256/"+strings.TrimPrefix(digest, "sha256:"), blobs[digest]); err != nil {
			return nil, err
		}
	}
	if err := out.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
