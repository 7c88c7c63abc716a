package main

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The chart's third row: what the store-wide rule allows (its limit), what
// each of its classes has in flight, and what reaches the store's 20 slots.

// slotsMax is the top of the slots panels: a few above the store's slots,
// so that buys queueing at the store show; higher values are drawn at it.
const slotsMax = 40

var (
	// classStyles draw the requests in flight per class; the login and
	// the home page in their colours of the latency panels.
	classStyles = map[string]draw.LineStyle{
		"login":   {Color: color.RGBA{R: 200, G: 30, B: 30, A: 255}, Width: vg.Points(1.5)},
		"home":    {Color: color.RGBA{R: 30, G: 90, B: 200, A: 255}, Width: vg.Points(1.5)},
		"default": {Color: color.RGBA{R: 20, G: 150, B: 70, A: 255}, Width: vg.Points(1.5)},
	}
	otherClassStyle = draw.LineStyle{Color: color.Gray{Y: 120}, Width: vg.Points(1.5)}
	// buysAtStoreStyle draws the most buys at the store at once, per second.
	buysAtStoreStyle = draw.LineStyle{Color: color.RGBA{R: 230, G: 140, B: 0, A: 255}, Width: vg.Points(1.5),
		Dashes: []vg.Length{vg.Points(2), vg.Points(2)}}
)

// classStyle returns the line style of class name.
func classStyle(name string) draw.LineStyle {
	if s, ok := classStyles[name]; ok {
		return s
	}
	return otherClassStyle
}

// slotsPlot draws, for run r, the rule's limit, the requests in flight of
// each class (or of the rule, without classes) as Envoy's stats had them
// every 250 ms, the store's slots, and the most buys at the store in each
// second.
func slotsPlot(r *RunResult, xMax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = r.title() + ": slots, requests in flight"
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = "requests in flight"
	p.Add(plotter.NewGrid())
	clamp := func(v int64) float64 { return float64(min(v, slotsMax)) }

	slots := float64(r.Store.Workers)
	w, err := plotter.NewLine(plotter.XYs{{X: 0, Y: slots}, {X: xMax, Y: slots}})
	if err != nil {
		return nil, err
	}
	w.LineStyle = slotsStyle
	p.Add(w)

	// The buys at the store, per second (a step line).
	n := int(r.Scenario.Duration / time.Second)
	buys := make([]float64, n)
	for _, s := range r.Timeline {
		if i := int(s.At / time.Second); i >= 0 && i < n {
			buys[i] = max(buys[i], clamp(s.BuysPeak))
		}
	}
	lines, err := stepLines(buys, func(i int) bool { return buys[i] > 0 }, buysAtStoreStyle)
	if err != nil {
		return nil, err
	}
	p.Add(lines...)

	if err := addRuleLines(p, r, clamp); err != nil {
		return nil, err
	}
	if err := addLaunchMarker(p, r.Scenario, 0, slotsMax); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = 0, xMax
	p.Y.Min, p.Y.Max = 0, slotsMax
	return p, nil
}

// slotSeries is one line of the rule's: the limit, or a class's requests
// in flight.
type slotSeries struct {
	style draw.LineStyle
	value func(LimitSample) int64
}

// addRuleLines draws the rule's limit and its requests in flight per class
// (or in all, without classes) as sampled every 250 ms.
func addRuleLines(p *plot.Plot, r *RunResult, clamp func(int64) float64) error {
	if len(r.Learnt) == 0 {
		return nil
	}
	series := []slotSeries{{learntStyle, func(s LimitSample) int64 { return s.Limit }}}
	for k, c := range r.Rule.Classes {
		series = append(series, slotSeries{classStyle(c), func(s LimitSample) int64 { return s.Classes[k] }})
	}
	if len(r.Rule.Classes) == 0 {
		series = append(series, slotSeries{classStyle("default"), func(s LimitSample) int64 { return s.InFlight }})
	}
	for _, sr := range series {
		xys := make(plotter.XYs, len(r.Learnt))
		for i, s := range r.Learnt {
			xys[i] = plotter.XY{X: s.At.Seconds(), Y: clamp(sr.value(s))}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.LineStyle = sr.style
		p.Add(l)
	}
	return nil
}

// slotsLegend is the legend of the slots row.
func slotsLegend(runs []*RunResult) plot.Legend {
	l := plot.NewLegend()
	for _, r := range runs {
		if len(r.Learnt) == 0 {
			continue
		}
		what := "learnt"
		if !r.Rule.Adaptive {
			what = "set by hand"
		}
		l.Add(fmt.Sprintf("limit %s (rule %s)", what, r.Rule.Name), styleThumb(learntStyle))
		for _, c := range r.Rule.Classes {
			name := "class " + c
			if c == "default" {
				name = "default (buys, products, cart)"
			}
			l.Add(name+" in flight", styleThumb(classStyle(c)))
		}
		if len(r.Rule.Classes) == 0 {
			l.Add("rule "+r.Rule.Name+": in flight", styleThumb(classStyle("default")))
		}
		break
	}
	l.Add(fmt.Sprintf("the store's %d slots (unknown to Sluice)", runs[0].Store.Workers), styleThumb(slotsStyle))
	l.Add("most buys at the store at once", styleThumb(buysAtStoreStyle))
	l.Add(fmt.Sprintf("  (queued or served; %d+ drawn at %d)", slotsMax, slotsMax), styleThumb(draw.LineStyle{}))
	return l
}
