// Command widgetctl drives the widget-operator's staged API upgrades and migrates the stored
// objects of any CRD. Installed as kubectl-widget, it also runs as `kubectl widget`. The
// commands live in internal/cli.
package main

import (
	"context"
	"os"

	"github.com/widgetry/widget-operator/internal/cli"
)

func main() {
	os.Exit(cli.Execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
