package e2e_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestMain stops whatever Envoy a test left running: in docker mode
// (SLUICE_ENVOY=docker) a container does not die with the test binary.
func TestMain(m *testing.M) {
	code := m.Run()
	envoytest.StopAll()
	fmt.Println(envoytest.Summary())
	os.Exit(code)
}
