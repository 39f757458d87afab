// Command kube is a multi-call binary of upstream's Kubernetes components (k8s.io/kubernetes
// v1.32.13), built here through this wrapper module for the real-cluster tests and the
// cluster harness (docs/cluster-tests.md). It runs the component named by the name it is
// called by (a symlink: kube-apiserver, kubelet, ...) or by its first argument
// (`kube kubelet --help`). Each component is upstream's cmd/<name> main unchanged; kubectl
// (what chart-testing's `ct install` calls) runs like upstream's cmd/kubectl/kubectl.go.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // for timeZone support in CronJob

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl: client-go's auth plugins, as upstream
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var components = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-proxy":              proxy.NewProxyCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 kubelet.NewKubeletCommand,
	"kubectl":                 kubectl.NewDefaultKubectlCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	newCommand, ok := components[name]
	if !ok && len(os.Args) > 1 {
		if newCommand, ok = components[os.Args[1]]; ok {
			os.Args = append([]string{os.Args[1]}, os.Args[2:]...)
		}
	}
	if !ok {
		names := make([]string, 0, len(components))
		for n := range components {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: %s COMPONENT [flags]  (or call it through a symlink named COMPONENT)\ncomponents: %v\n", name, names)
		os.Exit(2)
	}
	if filepath.Base(os.Args[0]) == "kubectl" {
		// upstream's cmd/kubectl: errors are printed by kubectl's own handler (exit code 1)
		if err := cli.RunNoErrOutput(newCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	os.Exit(cli.Run(newCommand()))
}
