package envoytest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// Validate runs `envoy --mode validate -c configPath` in workDir (relative
// paths in the configuration, such as a wasm filename, resolve against it;
// "" means the current directory) and returns Envoy's output. bin "" means
// FindEnvoy. The error includes the output's error lines and tail. Note that
// Envoy's validate mode loads wasm modules and runs their OnPluginStart, so
// it also checks a plugin's configuration.
func Validate(ctx context.Context, bin, configPath, workDir string) (string, error) {
	if bin == "" {
		var err error
		if bin, err = FindEnvoy(); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(configPath)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, "--mode", "validate", "-c", abs, "--log-level", "info")
	cmd.Dir = workDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	setProcAttr(cmd)
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("envoytest: envoy --mode validate -c %s: %v\n%s", abs, err, logDigest(out.String(), 30))
	}
	return out.String(), nil
}
