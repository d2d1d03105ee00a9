// Command kube-apiserver is a thin wrapper around the upstream kube-apiserver
// command so it can be built with `go build` from the Go module proxy.
//
// `go install k8s.io/kubernetes/cmd/kube-apiserver@vX` does not work because
// k8s.io/kubernetes replaces its staging modules with local paths at v0.0.0;
// this module's go.mod pins each of them to the matching published v0.x tag.
// The binary is used by tests/infra/kube.py as an envtest-style control plane.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream embeds them

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // same log formats as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	os.Exit(cli.Run(command))
}
