// Package version holds the build's version, set at link time:
//
//	go build -ldflags "-X github.com/widgetry/widget-operator/internal/version.Version=v0.1.0"
package version

import "runtime"

// Version is the release version; "dev" for local builds.
var Version = "dev"

// String is "<version> (<go version>)", for --version.
func String() string { return Version + " (" + runtime.Version() + ")" }
