// Command flytepropeller is Flyte's propeller v1.16.8, unchanged: upstream's controller command
// (cmd/controller/cmd.Execute) with the task plugins the cluster tier runs.
//
// Why not upstream's own main (flytepropeller/cmd/controller) and its plugin loader
// (flytepropeller/plugins): the loader imports every plugin Flyte ships, the Spark plugin among them, whose module
// (github.com/kubeflow/spark-operator) the Go module proxy refuses (403 for the pseudo-version flyteplugins v1.16.8
// requires). Blank imports register a plugin, so this list is the loader minus what cannot be built or is not
// needed here. The connector plugin (connector-service) needs no import: the task handler registers it itself.
package main

import (
	"github.com/flyteorg/flyte/flytepropeller/cmd/controller/cmd"

	// a plain container or pod task (flytekit's @task): the MNIST example's evaluation, run as an ordinary pod
	_ "github.com/flyteorg/flyte/flyteplugins/go/tasks/plugins/k8s/pod"
	// Flyte's built-in PyTorch plugin (kfoperators): creates the PyTorchJob itself when enabled as `pytorch`
	_ "github.com/flyteorg/flyte/flyteplugins/go/tasks/plugins/k8s/kfoperators/pytorch"
	// map tasks (container_array) over pods
	_ "github.com/flyteorg/flyte/flyteplugins/go/tasks/plugins/array/k8s"
)

func main() {
	cmd.Execute()
}
