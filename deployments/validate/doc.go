// Package validate checks bulkaction's deployment files offline, without a Docker engine or a
// Kubernetes cluster: the Helm chart in deployments/helm/bulkaction (linted strictly, rendered
// for its default values and every ci/*.yaml, every manifest decoded strictly into Kubernetes
// API types and cross-checked), the compose stack in deployments/compose (loaded by the
// compose-spec loader) and the Dockerfile.
//
// Every BULKACTION_* variable either of them sets must be a real setting of the binary: the list
// is read by reflection from the envconfig tags of config.Config, and the values are run through
// config.Config's own validation.
//
// It is a module of its own (like bench/) so that Helm, Kubernetes and compose-spec stay out of
// the main module's dependencies. `make test-deployments` runs its tests.
package validate
