// Command flyte-create-execution is the cluster tier's stand-in for flyteadmin's CreateExecution: the step that
// turns a registered workflow into the FlyteWorkflow custom resource propeller runs. flyteadmin itself is not
// served by the Go module proxy at any version that pairs with flytepropeller v1.16.8, so it cannot be built here.
//
// What it does, in admin's order, with propeller's own public packages:
//  1. reads what `pyflyte package` wrote (a .tgz or its unpacked folder: admin.TaskSpec `*_1.pb`,
//     admin.WorkflowSpec `*_2.pb`, admin.LaunchPlan `*_3.pb`) and fills the registration placeholders of every
//     identifier (project, domain, version), as `pyflyte register` / `flytectl register files` do;
//  2. compiles each task (compiler.CompileTask) and the workflow with its subworkflows (compiler.CompileWorkflow);
//  3. merges the execution's inputs over the launch plan's defaults and fixed inputs (required ones must be given,
//     fixed ones must not be);
//  4. builds the FlyteWorkflow with propeller's k8s transformer (transformers/k8s.BuildFlyteWorkflow) and sets what
//     admin's workflow engine sets on it: the execution id, accepted-at time, propeller's finalizer, event version 2,
//     the execution config (environment variables, interruptible), the raw output data prefix, the service account;
//  5. creates it in the execution's namespace (`--kubeconfig`), or prints it as JSON for `kubectl create -f -`.
//
// What admin does and this does not: store anything (no execution record, no events, no outputs by API), apply
// platform task-resource defaults or matchable attributes (cluster resources, queues, quality of service),
// offload the closure or the inputs, launch child launch plans. Aborting an execution is deleting its FlyteWorkflow
// (admin does exactly that, with background propagation).
package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/admin"
	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"
	"github.com/flyteorg/flyte/flytepropeller/pkg/apis/flyteworkflow/v1alpha1"
	"github.com/flyteorg/flyte/flytepropeller/pkg/client/clientset/versioned"
	"github.com/flyteorg/flyte/flytepropeller/pkg/compiler"
	"github.com/flyteorg/flyte/flytepropeller/pkg/compiler/common"
	"github.com/flyteorg/flyte/flytepropeller/pkg/compiler/transformers/k8s"
)

// The placeholders `pyflyte package` leaves in every identifier (flytekit's serialization settings without a
// project, domain or version); registration fills them.
const (
	projectPlaceholder = "{{ registration.project }}"
	domainPlaceholder  = "{{ registration.domain }}"
	versionPlaceholder = "{{ registration.version }}"
)

// propellerFinalizer is flytepropeller/pkg/controller.Finalizer: admin adds it so that propeller aborts the
// execution's tasks before the FlyteWorkflow goes (importing that package would link all of propeller in here).
const propellerFinalizer = "flyte.org/finalizer"

type keyValues map[string]string

func (k keyValues) String() string { return fmt.Sprint(map[string]string(k)) }

func (k keyValues) Set(v string) error {
	key, value, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	k[key] = value
	return nil
}

type options struct {
	pkg             string
	workflow        string
	project         string
	domain          string
	version         string
	name            string
	namespace       string
	inputs          string
	rawOutputPrefix string
	serviceAccount  string
	interruptible   string
	envs            keyValues
	kubeconfig      string
}

func main() {
	o := options{envs: keyValues{}}
	flag.StringVar(&o.pkg, "package", "", "what pyflyte package wrote: the .tgz, or the folder it was unpacked to (required)")
	flag.StringVar(&o.workflow, "workflow", "", "the workflow's name, e.g. examples.mnist.workflow.mnist_workflow (required)")
	flag.StringVar(&o.project, "project", "flytesnacks", "the registration's project")
	flag.StringVar(&o.domain, "domain", "development", "the registration's domain")
	flag.StringVar(&o.version, "version", "v1", "the registration's version")
	flag.StringVar(&o.name, "name", "", "the execution's name, the FlyteWorkflow's name: a DNS label (admin allows at most 63 characters; required)")
	flag.StringVar(&o.namespace, "namespace", "", "where the FlyteWorkflow goes (default <project>-<domain>, admin's default template)")
	flag.StringVar(&o.inputs, "inputs", "", "a core.LiteralMap (.pb) of the execution's inputs; the launch plan's defaults fill the rest")
	flag.StringVar(&o.rawOutputPrefix, "raw-output-prefix", "", "the execution's raw output data prefix (admin's raw_output_data_config)")
	flag.StringVar(&o.serviceAccount, "service-account", "", "the Kubernetes service account the tasks run as (security_context.run_as)")
	flag.StringVar(&o.interruptible, "interruptible", "", "true or false: the execution's interruptible override (unset: the workflow's)")
	flag.Var(o.envs, "env", "KEY=VALUE: an environment variable of every task of the execution (repeatable; as pyflyte run --envs)")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "create the FlyteWorkflow with this kubeconfig; without it, print it as JSON")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "flyte-create-execution: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	for flagName, value := range map[string]string{"--package": o.pkg, "--workflow": o.workflow, "--name": o.name} {
		if value == "" {
			return fmt.Errorf("%s is required", flagName)
		}
	}
	if o.namespace == "" {
		o.namespace = o.project + "-" + o.domain
	}
	files, err := readPackage(o.pkg)
	if err != nil {
		return err
	}
	tasks, workflows, launchPlans, err := decode(files)
	if err != nil {
		return err
	}
	for _, m := range append(append(toMessages(tasks), toMessages(workflows)...), toMessages(launchPlans)...) {
		hydrate(m.ProtoReflect(), o.project, o.domain, o.version)
	}
	closure, launchPlan, err := compile(o.workflow, tasks, workflows, launchPlans)
	if err != nil {
		return err
	}
	given := &core.LiteralMap{}
	if o.inputs != "" {
		raw, err := os.ReadFile(o.inputs)
		if err != nil {
			return err
		}
		if err := proto.Unmarshal(raw, given); err != nil {
			return fmt.Errorf("--inputs %s is not a core.LiteralMap: %w", o.inputs, err)
		}
	}
	inputs, err := mergeInputs(launchPlan, given)
	if err != nil {
		return err
	}
	execID := &core.WorkflowExecutionIdentifier{Project: o.project, Domain: o.domain, Name: o.name}
	flyteWf, err := k8s.BuildFlyteWorkflow(closure, inputs, execID, o.namespace)
	if err != nil {
		return fmt.Errorf("building the FlyteWorkflow: %w", err)
	}
	if err := prepare(flyteWf, execID, o); err != nil {
		return err
	}
	if o.kubeconfig == "" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(flyteWf)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := versioned.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	created, err := client.FlyteworkflowV1alpha1().FlyteWorkflows(o.namespace).Create(ctx, flyteWf, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating FlyteWorkflow %s/%s: %w", o.namespace, o.name, err)
	}
	fmt.Fprintf(out, "flyteworkflow %s/%s created (uid %s)\n", created.Namespace, created.Name, created.UID)
	return nil
}

// readPackage returns every .pb file of the package by its base name.
func readPackage(path string) (map[string][]byte, error) {
	files := map[string][]byte{}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		matches, err := filepath.Glob(filepath.Join(path, "*.pb"))
		if err != nil {
			return nil, err
		}
		for _, m := range matches {
			if files[filepath.Base(m)], err = os.ReadFile(m); err != nil {
				return nil, err
			}
		}
		return files, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s is neither a folder nor a .tgz: %w", path, err)
	}
	archive := tar.NewReader(gz)
	for {
		header, err := archive.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if header.Typeflag == tar.TypeReg && strings.HasSuffix(header.Name, ".pb") {
			if files[filepath.Base(header.Name)], err = io.ReadAll(archive); err != nil {
				return nil, err
			}
		}
	}
}

// decode sorts the package's files by the resource type at the end of their names (<n>_<name>_<type>.pb: 1 task,
// 2 workflow, 3 launch plan, flytekit's core.ResourceType numbers).
func decode(files map[string][]byte) ([]*admin.TaskSpec, []*admin.WorkflowSpec, []*admin.LaunchPlan, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var tasks []*admin.TaskSpec
	var workflows []*admin.WorkflowSpec
	var launchPlans []*admin.LaunchPlan
	for _, name := range names {
		var m proto.Message
		switch {
		case strings.HasSuffix(name, "_1.pb"):
			t := &admin.TaskSpec{}
			tasks, m = append(tasks, t), t
		case strings.HasSuffix(name, "_2.pb"):
			w := &admin.WorkflowSpec{}
			workflows, m = append(workflows, w), w
		case strings.HasSuffix(name, "_3.pb"):
			lp := &admin.LaunchPlan{}
			launchPlans, m = append(launchPlans, lp), lp
		default:
			continue
		}
		if err := proto.Unmarshal(files[name], m); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if len(workflows) == 0 {
		return nil, nil, nil, fmt.Errorf("the package holds no workflow (*_2.pb)")
	}
	return tasks, workflows, launchPlans, nil
}

func toMessages[T proto.Message](items []T) []proto.Message {
	out := make([]proto.Message, 0, len(items))
	for _, item := range items {
		out = append(out, item)
	}
	return out
}

var identifierName = (&core.Identifier{}).ProtoReflect().Descriptor().FullName()

// hydrate fills the registration placeholders of every core.Identifier inside m.
func hydrate(m protoreflect.Message, project, domain, version string) {
	if m.Descriptor().FullName() == identifierName {
		for field, value := range map[string]string{"project": project, "domain": domain, "version": version} {
			fd := m.Descriptor().Fields().ByName(protoreflect.Name(field))
			current := m.Get(fd).String()
			if current == "" || current == projectPlaceholder || current == domainPlaceholder || current == versionPlaceholder {
				m.Set(fd, protoreflect.ValueOfString(value))
			}
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			list := v.List()
			for i := 0; i < list.Len(); i++ {
				hydrate(list.Get(i).Message(), project, domain, version)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				hydrate(mv.Message(), project, domain, version)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			hydrate(v.Message(), project, domain, version)
		}
		return true
	})
}

// compile compiles the named workflow with every task of the package, and returns its launch plan (the default one,
// named after the workflow, as `pyflyte package` writes it).
func compile(name string, tasks []*admin.TaskSpec, workflows []*admin.WorkflowSpec, launchPlans []*admin.LaunchPlan) (
	*core.CompiledWorkflowClosure, *admin.LaunchPlan, error) {
	var spec *admin.WorkflowSpec
	known := []string{}
	for _, w := range workflows {
		known = append(known, w.GetTemplate().GetId().GetName())
		if w.GetTemplate().GetId().GetName() == name {
			spec = w
		}
	}
	if spec == nil {
		return nil, nil, fmt.Errorf("no workflow %q in the package: it has %s", name, strings.Join(known, ", "))
	}
	compiled := make([]*core.CompiledTask, 0, len(tasks))
	for _, t := range tasks {
		c, err := compiler.CompileTask(t.GetTemplate())
		if err != nil {
			return nil, nil, fmt.Errorf("compiling task %s: %w", t.GetTemplate().GetId().GetName(), err)
		}
		compiled = append(compiled, c)
	}
	var launchPlan *admin.LaunchPlan
	providers := []common.InterfaceProvider{}
	for _, lp := range launchPlans {
		providers = append(providers, compiler.NewLaunchPlanInterfaceProvider(lp))
		if lp.GetId().GetName() == name {
			launchPlan = lp
		}
	}
	if launchPlan == nil {
		return nil, nil, fmt.Errorf("no launch plan %q in the package (pyflyte package writes the default one)", name)
	}
	closure, err := compiler.CompileWorkflow(spec.GetTemplate(), spec.GetSubWorkflows(), compiled, providers)
	if err != nil {
		return nil, nil, fmt.Errorf("compiling workflow %s: %w", name, err)
	}
	return closure, launchPlan, nil
}

// mergeInputs is the execution's inputs as admin computes them: each of the launch plan's expected inputs from
// what the execution gives, else its default; a required one with neither is an error; the fixed inputs are
// added, and giving one of them is an error too.
func mergeInputs(lp *admin.LaunchPlan, given *core.LiteralMap) (*core.LiteralMap, error) {
	out := &core.LiteralMap{Literals: map[string]*core.Literal{}}
	expected := lp.GetSpec().GetDefaultInputs().GetParameters()
	fixed := lp.GetSpec().GetFixedInputs().GetLiterals()
	for name, value := range given.GetLiterals() {
		if _, ok := fixed[name]; ok {
			return nil, fmt.Errorf("input %q is fixed by the launch plan and cannot be given", name)
		}
		if _, ok := expected[name]; !ok {
			return nil, fmt.Errorf("input %q is not an input of the launch plan", name)
		}
		out.Literals[name] = value
	}
	for name, param := range expected {
		if _, ok := out.Literals[name]; ok {
			continue
		}
		if param.GetDefault() != nil {
			out.Literals[name] = param.GetDefault()
		} else if param.GetRequired() {
			return nil, fmt.Errorf("input %q is required and has no default", name)
		}
	}
	for name, value := range fixed {
		out.Literals[name] = value
	}
	return out, nil
}

// prepare sets on the FlyteWorkflow what admin's workflow engine sets (flyteadmin/pkg/workflowengine/impl).
func prepare(wf *v1alpha1.FlyteWorkflow, execID *core.WorkflowExecutionIdentifier, o options) error {
	wf.ExecutionID = v1alpha1.WorkflowExecutionIdentifier{WorkflowExecutionIdentifier: execID}
	now := metav1.NewTime(time.Now())
	wf.AcceptedAt = &now
	wf.Finalizers = append(wf.Finalizers, propellerFinalizer)
	wf.WorkflowMeta = &v1alpha1.WorkflowMeta{EventVersion: v1alpha1.EventVersion2}
	config := v1alpha1.ExecutionConfig{
		TaskPluginImpls:   map[string]v1alpha1.TaskPluginOverride{},
		RecoveryExecution: v1alpha1.WorkflowExecutionIdentifier{},
	}
	if len(o.envs) > 0 {
		config.EnvironmentVariables = map[string]string(o.envs)
	}
	switch o.interruptible {
	case "":
	case "true", "false":
		value := o.interruptible == "true"
		config.Interruptible = &value
	default:
		return fmt.Errorf("--interruptible %q: true or false", o.interruptible)
	}
	wf.ExecutionConfig = config
	if o.rawOutputPrefix != "" {
		wf.RawOutputDataConfig = v1alpha1.RawOutputDataConfig{
			RawOutputDataConfig: &admin.RawOutputDataConfig{OutputLocationPrefix: o.rawOutputPrefix},
		}
	}
	if o.serviceAccount != "" {
		wf.SecurityContext = core.SecurityContext{RunAs: &core.Identity{K8SServiceAccount: o.serviceAccount}}
		wf.ServiceAccountName = o.serviceAccount
	}
	return nil
}
