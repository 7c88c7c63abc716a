package config

import (
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/checkout", "/checkout"},
		{"/checkout?a=1", "/checkout"},
		{"/", "/"},
		{"", ""},
		{"*", "*"},
		{"/%63heckout", "/checkout"},
		{"/%63%68eckout?x=%2e", "/checkout"},
		{"/%7euser/%7Efile", "/~user/~file"},
		{"/a%2fb%3a", "/a/b%3A"},
		{"/a%2Fb", "/a/b"},
		{"/%2Fcheckout", "/checkout"},
		{"/%2e%2e%2fcheckout", "/checkout"},
		{"/a%5cb\\c", "/a/b/c"},
		{"/%5C..%5Ccheckout", "/checkout"},
		{"/a%3fb", "/a%3Fb"},
		{"/a%zzb%", "/a%25zzb%25"},
		{"/%7%30", "/%2570"},
		{"/a%2", "/a%252"},
		{"//checkout", "/checkout"},
		{"/a//b///c", "/a/b/c"},
		{"/./checkout", "/checkout"},
		{"/%2e/checkout", "/checkout"},
		{"/%2E%2E/checkout", "/checkout"},
		{"/x/../checkout", "/checkout"},
		{"/x/y/../../checkout", "/checkout"},
		{"/../../checkout", "/checkout"},
		{"/a/b/..", "/a/"},
		{"/a/.", "/a/"},
		{"/a/", "/a/"},
		{"/a/..b/.c", "/a/..b/.c"},
		{"/..", "/"},
		{"/.", "/"},
		{"/a/./b/../c/", "/a/c/"},
		// Path parameters (Tomcat, Jetty and other servlet containers
		// drop them, and take "..;" for ".."): a rule for /checkout is not
		// escaped by "/checkout;x" nor by "/x/..;/checkout".
		{"/checkout;jsessionid=1", "/checkout"},
		{"/checkout;a/items;b=2", "/checkout/items"},
		{"/x/..;/checkout", "/checkout"},
		{"/..;/checkout", "/checkout"},
		{"/.;x/checkout", "/checkout"},
		{"/;x/checkout", "/checkout"},
		{"/a/;x", "/a/"},
		{"/a%3Bb", "/a%3Bb"},
	} {
		var buf []byte
		if got := CleanPath(&buf, c.in); got != c.want {
			t.Errorf("CleanPath(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCleanPathCleanDoesNotAllocate(t *testing.T) {
	var buf []byte
	if n := testing.AllocsPerRun(100, func() { _ = CleanPath(&buf, "/api/v1/orders?page=2") }); n != 0 {
		t.Errorf("%v allocations for a clean path", n)
	}
}

func TestMatchPathIsCleaned(t *testing.T) {
	cfg, err := Parse([]byte(`{"rules":[{"name":"a","match":{"path_prefix":"/%7Euser//x"},"limit":1,"window":"1s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Rules[0].Match.PathPrefix; got != "/~user/x" {
		t.Errorf("path_prefix parsed as %q", got)
	}
}

// FuzzCleanPath: whatever the client sends, the clean path is a fixed
// point (cleaning it again changes nothing, so a rule's own path and a
// request's compare alike), starts with / when the path did, and has no
// backslash, no empty segment and no dot segment left for an upstream to
// resolve differently.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/checkout", "/%63heckout?x", "//a/./b/../c", "/%2e%2E/%2f%5c\\x", "/a%zz%2", "*", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var buf []byte
		out := CleanPath(&buf, in)
		var buf2 []byte
		if again := CleanPath(&buf2, out); again != out {
			t.Fatalf("CleanPath(%q) = %q, cleaned again %q", in, out, again)
		}
		if !strings.HasPrefix(in, "/") {
			return
		}
		if !strings.HasPrefix(out, "/") || strings.ContainsAny(out, "\\?") || strings.Contains(out, "//") {
			t.Fatalf("CleanPath(%q) = %q", in, out)
		}
		for _, seg := range strings.Split(out, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("CleanPath(%q) = %q keeps a dot segment", in, out)
			}
		}
	})
}
