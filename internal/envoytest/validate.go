package envoytest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Validate runs `envoy --mode validate -c configPath` in workDir (relative
// paths in the configuration, such as a wasm filename, resolve against it;
// "" means the current directory) and returns Envoy's output. bin "" means
// Target (the mode's Envoy); a bin of the form docker:IMAGE validates in a
// container of IMAGE. The error includes the output's error lines and tail. Note that
// Envoy's validate mode loads wasm modules and runs their OnPluginStart, so
// it also checks a plugin's configuration.
func Validate(ctx context.Context, bin, configPath, workDir string) (string, error) {
	if bin == "" {
		var err error
		if bin, err = Target(); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(configPath)
	if err != nil {
		return "", err
	}
	args := []string{"--mode", "validate", "-c", abs, "--log-level", "info"}
	var cmd *exec.Cmd
	if img, ok := imageOf(bin); ok {
		// In a container: the configuration, the files it names by absolute
		// path (wasm modules) and the working directory are mounted at
		// their own paths.
		if err := CheckImage(ctx, img); err != nil {
			return "", err
		}
		if workDir == "" {
			if workDir, err = os.Getwd(); err != nil {
				return "", err
			}
		}
		if workDir, err = filepath.Abs(workDir); err != nil {
			return "", err
		}
		b, err := os.ReadFile(abs)
		if err != nil {
			return "", err
		}
		name := containerName()
		defer dockerRemove(name)
		cmd = dockerRun(img, name, workDir, append(referencedFiles(string(b)), abs), args)
		cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	} else {
		cmd = exec.CommandContext(ctx, bin, args...)
		cmd.Dir = workDir
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	setProcAttr(cmd)
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("envoytest: envoy --mode validate -c %s: %v\n%s", abs, err, logDigest(out.String(), 30))
	}
	return out.String(), nil
}
