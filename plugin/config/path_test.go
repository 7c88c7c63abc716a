package config

import "testing"

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
		{"/a%zzb%", "/a%zzb%"},
		{"/a%2", "/a%2"},
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
