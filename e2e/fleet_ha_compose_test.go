package e2e_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestFleetHAComposeFiles: the compose files of the fleet on Redis Sentinel
// and on a Redis Cluster agree with themselves (the service's REDIS_URL
// names the Sentinels, or the nodes, that the file runs; the Sentinels
// watch the master the replica follows; cluster mode has implicit
// pipelining) and run the Envoys of docker-compose.yaml unchanged.
// TestFleetSentinel and TestFleetRedisCluster run the same deployments as
// loopback processes.
func TestFleetHAComposeFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(mustRepoRoot(t), "envoy", "fleet")
	base := readYAMLFile(t, filepath.Join(dir, "docker-compose.yaml"))
	args := func(svc any, key string) []string {
		var out []string
		for _, a := range yamlGet(t, svc, key).([]any) {
			out = append(out, a.(string))
		}
		return out
	}
	after := func(list []string, flag string) string {
		for i, a := range list {
			if a == flag && i+1 < len(list) {
				return list[i+1]
			}
		}
		return ""
	}
	for _, name := range []string{"docker-compose.sentinel.yaml", "docker-compose.cluster.yaml"} {
		c := readYAMLFile(t, filepath.Join(dir, name))
		for _, s := range []string{"envoy-1", "envoy-2", "envoy-3", "store"} {
			if !reflect.DeepEqual(yamlGet(t, c, "services", s), yamlGet(t, base, "services", s)) {
				t.Errorf("%s: %s differs from docker-compose.yaml's", name, s)
			}
		}
		env := yamlGet(t, c, "services", "ratelimit", "environment")
		if got := yamlStr(t, env, "GRPC_PORT"); got != "18081" {
			t.Errorf("%s: the service's gRPC port %s, the Envoys call 18081", name, got)
		}
		urls := strings.Split(yamlStr(t, env, "REDIS_URL"), ",")
		switch name {
		case "docker-compose.sentinel.yaml":
			if yamlStr(t, env, "REDIS_TYPE") != "sentinel" {
				t.Errorf("%s: REDIS_TYPE is not sentinel", name)
			}
			master := after(args(yamlGet(t, c, "services", "redis-master"), "command"), "--port")
			replica := args(yamlGet(t, c, "services", "redis-replica"), "command")
			if after(replica, "--replicaof") != "127.0.0.1" || replica[len(replica)-1] != master {
				t.Errorf("%s: the replica does not follow the master :%s: %v", name, master, replica)
			}
			if len(urls) != 4 || urls[0] != "sluice" {
				t.Fatalf("%s: REDIS_URL %v: want the master's name, then three Sentinels", name, urls)
			}
			for n := 1; n <= 3; n++ {
				b, err := os.ReadFile(filepath.Join(dir, "sentinel", "sentinel-"+string(rune('0'+n))+".conf"))
				if err != nil {
					t.Fatal(err)
				}
				port := regexp.MustCompile(`(?m)^port (\d+)$`).FindStringSubmatch(string(b))
				if port == nil || urls[n] != "127.0.0.1:"+port[1] {
					t.Errorf("%s: Sentinel %d listens on %v, REDIS_URL names %s", name, n, port, urls[n])
				}
				if !strings.Contains(string(b), "sentinel monitor sluice 127.0.0.1 "+master+" 2\n") {
					t.Errorf("sentinel-%d.conf does not watch the master :%s with quorum 2", n, master)
				}
			}
		case "docker-compose.cluster.yaml":
			if yamlStr(t, env, "REDIS_TYPE") != "cluster" || yamlStr(t, env, "REDIS_PIPELINE_WINDOW") == "" {
				t.Errorf("%s: REDIS_TYPE is not cluster, or REDIS_PIPELINE_WINDOW is missing (cluster mode needs it)", name)
			}
			create := strings.Join(args(yamlGet(t, c, "services", "cluster-create"), "command"), " ")
			for n, u := range urls {
				node := args(yamlGet(t, c, "services", "redis-"+string(rune('1'+n))), "command")
				if "127.0.0.1:"+after(node, "--port") != u || after(node, "--cluster-enabled") != "yes" {
					t.Errorf("%s: node %d %v, REDIS_URL names %s", name, n+1, node, u)
				}
				if !strings.Contains(create, u) {
					t.Errorf("%s: cluster-create does not join %s", name, u)
				}
			}
			if len(urls) != 3 {
				t.Errorf("%s: REDIS_URL %v: want the three nodes", name, urls)
			}
		}
	}
}
