package bench

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeChart draws the scenarios' throughput (requests or transactions per second) and p99
// latency side by side, one bar per scenario, into a PNG.
func writeChart(path string, scenarios []Scenario) error {
	var names []string
	var tput, p99 plotter.Values
	for _, s := range scenarios {
		names = append(names, s.Name)
		tput = append(tput, s.Throughput)
		p99 = append(p99, s.P99MS)
	}
	if len(names) == 0 {
		return fmt.Errorf("bench: chart: no scenarios")
	}
	left, err := barPlot("Throughput per scenario", "per second", names, tput)
	if err != nil {
		return err
	}
	right, err := barPlot("p99 latency per scenario", "ms (0: not measured)", names, p99)
	if err != nil {
		return err
	}
	const w, h = 16 * vg.Inch, 7 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Millimeter * 5, PadBottom: vg.Millimeter * 5, PadLeft: vg.Millimeter * 5, PadRight: vg.Millimeter * 5}
	plots := [][]*plot.Plot{{left, right}}
	canvases := plot.Align(plots, tiles, dc)
	left.Draw(canvases[0][0])
	right.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: chart: write PNG: %w", err)
	}
	return f.Close()
}

func barPlot(title, ylabel string, names []string, values plotter.Values) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	bars, err := plotter.NewBarChart(values, vg.Points(14))
	if err != nil {
		return nil, fmt.Errorf("bench: chart: %w", err)
	}
	bars.LineStyle.Width = vg.Length(0)
	bars.Color = plotter.DefaultLineStyle.Color
	p.Add(bars)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 1.0
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	return p, nil
}
