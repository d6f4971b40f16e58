package validate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Object is a decoded manifest.
type Object struct {
	Manifest
	APIVersion, Kind, Name string
	// Obj is a typed Kubernetes object (*appsv1.Deployment, …) or, for the custom resources the
	// chart renders, a *ServiceMonitor or *ScaledObject.
	Obj any
}

func (o Object) String() string { return fmt.Sprintf("%s %s (%s)", o.Kind, o.Name, o.Manifest) }

var strictDecoder runtime.Decoder

func init() {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	strictDecoder = serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// Decode decodes every manifest strictly: into its Kubernetes API type for built-in kinds, into
// ServiceMonitor or ScaledObject for those custom resources; an unknown field, a duplicate key,
// a wrong type or an unknown kind is an error.
func Decode(ms []Manifest) ([]Object, error) {
	var out []Object
	var errs []error
	for _, m := range ms {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(m.YAML), &tm); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m, err))
			continue
		}
		o := Object{Manifest: m, APIVersion: tm.APIVersion, Kind: tm.Kind}
		var err error
		switch tm.GroupVersionKind().GroupKind().String() {
		case "ServiceMonitor.monitoring.coreos.com":
			o.Obj, err = decodeCustom[ServiceMonitor](m.YAML, "monitoring.coreos.com/v1", tm)
		case "ScaledObject.keda.sh":
			o.Obj, err = decodeCustom[ScaledObject](m.YAML, "keda.sh/v1alpha1", tm)
		default:
			o.Obj, _, err = strictDecoder.Decode([]byte(m.YAML), nil, nil)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s %s: %w", m, tm.APIVersion, tm.Kind, err))
			continue
		}
		if acc, ok := o.Obj.(metav1.Object); ok {
			o.Name = acc.GetName()
		}
		if o.Name == "" {
			errs = append(errs, fmt.Errorf("%s: %s without metadata.name", m, tm.Kind))
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// customResource is what the custom resource types have in common.
type customResource interface {
	metav1.Object
	check() error
}

func decodeCustom[T any, PT interface {
	*T
	customResource
}](doc, apiVersion string, tm metav1.TypeMeta) (any, error) {
	if tm.APIVersion != apiVersion {
		return nil, fmt.Errorf("apiVersion %s: want %s", tm.APIVersion, apiVersion)
	}
	var v T
	if err := yaml.UnmarshalStrict([]byte(doc), &v); err != nil {
		return nil, err
	}
	if err := PT(&v).check(); err != nil {
		return nil, err
	}
	return PT(&v), nil
}

// ServiceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the chart uses; a
// field outside it fails the strict decode.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func (s *ServiceMonitor) check() error {
	if len(s.Spec.Selector.MatchLabels) == 0 && len(s.Spec.Selector.MatchExpressions) == 0 {
		return errors.New("spec.selector is empty")
	}
	if len(s.Spec.Endpoints) == 0 {
		return errors.New("spec.endpoints is empty")
	}
	for i, e := range s.Spec.Endpoints {
		if e.Port == "" {
			return fmt.Errorf("spec.endpoints[%d].port is empty", i)
		}
		for _, d := range []string{e.Interval, e.ScrapeTimeout} {
			if d != "" && !promDuration(d) {
				return fmt.Errorf("spec.endpoints[%d]: %q is not a Prometheus duration", i, d)
			}
		}
	}
	return nil
}

func promDuration(s string) bool {
	for _, u := range []string{"ms", "s", "m", "h"} {
		if n, ok := strings.CutSuffix(s, u); ok {
			_, err := strconv.ParseUint(n, 10, 32)
			return err == nil
		}
	}
	return false
}

// ScaledObject is the part of keda.sh/v1alpha1 ScaledObject the chart uses.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		Triggers        []struct {
			Type       string            `json:"type"`
			Name       string            `json:"name,omitempty"`
			MetricType string            `json:"metricType,omitempty"`
			Metadata   map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

func (s *ScaledObject) check() error {
	if s.Spec.ScaleTargetRef.Name == "" {
		return errors.New("spec.scaleTargetRef.name is empty")
	}
	if len(s.Spec.Triggers) == 0 {
		return errors.New("spec.triggers is empty")
	}
	for i, t := range s.Spec.Triggers {
		switch t.MetricType {
		case "", "AverageValue", "Value", "Utilization":
		default:
			return fmt.Errorf("spec.triggers[%d].metricType %q", i, t.MetricType)
		}
		if t.Type != "prometheus" {
			continue
		}
		for _, k := range []string{"serverAddress", "query", "threshold"} {
			if t.Metadata[k] == "" {
				return fmt.Errorf("spec.triggers[%d] (prometheus): metadata.%s is empty", i, k)
			}
		}
		if v, err := strconv.ParseFloat(t.Metadata["threshold"], 64); err != nil || v <= 0 {
			return fmt.Errorf("spec.triggers[%d]: threshold %q is not a positive number", i, t.Metadata["threshold"])
		}
	}
	return nil
}

var (
	_ customResource = (*ServiceMonitor)(nil)
	_ customResource = (*ScaledObject)(nil)
)
