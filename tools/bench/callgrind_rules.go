package main

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// manyRulesVariants are the callgrind rows of a configuration of many
// rules (-callgrind-only rules-two,rules-many,rules-none1,rules-none1000;
// not counted unless named, each costs an Envoy under valgrind): what a
// request costs must depend on the rules that match it, not on how many
// exist. The bench's requests are GET / from rotating clients.
//
//	rules-two      two rules that match every request (prefix "/")
//	rules-many     1,000 per-route rules that match none, then those two
//	rules-none1    one rule that matches no request
//	rules-none1000 1,000 rules that match no request
func manyRulesVariants(only, sluice string, mk func(key, what string, edit func(*envoytest.Options)) *cgVariant) []*cgVariant {
	if !strings.Contains(only, "rules-") {
		return nil
	}
	two := `{"name":"a","match":{"path_prefix":"/"},"limit":1000000,"window":"1s"},` +
		`{"name":"b","match":{"path_prefix":"/"},"limit":1000000,"window":"1s","key":["client_ip","method"]}`
	cfg := func(rules string, metrics string) string {
		return `{"rules":[` + rules + `],"headers":"legacy","max_keys":20000,"rule_metrics":[` + metrics + `]}`
	}
	v := func(key, what, config string) *cgVariant {
		return mk(key, what, func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: sluice, Config: config}
		})
	}
	return []*cgVariant{
		v("rules-two", "Sluice, 2 rules, both matching, all admitted", cfg(two, `"a","b"`)),
		v("rules-many", "Sluice, 1,000 per-route rules matching none, then the 2 matching ones", cfg(routeRules(1000)+","+two, `"a","b"`)),
		v("rules-none1", "Sluice, 1 rule matching no request", cfg(routeRules(1), `"r0000"`)),
		v("rules-none1000", "Sluice, 1,000 rules matching no request", cfg(routeRules(1000), `"r0000"`)),
	}
}

// routeRules returns n rules on prefixes /r/NNNN/, which GET / never matches.
func routeRules(n int) string {
	rules := make([]string, n)
	for i := range rules {
		rules[i] = fmt.Sprintf(`{"name":"r%04d","match":{"path_prefix":"/r/%04d/"},"limit":10,"window":"1s"}`, i, i)
	}
	return strings.Join(rules, ",")
}
