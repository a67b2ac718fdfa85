// Package controllers is the callback-platform operator: it reconciles each PaymentChannel into
// a callbackd Deployment (with its ConfigMap, Service, ServiceAccount, PodDisruptionBudget,
// NetworkPolicy and autoscaler), a Redis Sentinel topology, and the schema-migration Job that
// gates every callbackd rollout.
//
// Builders (the build* functions) are pure: they take the PaymentChannel and what was read from
// the cluster and return apply configurations, which the sub-reconcilers write with server-side
// apply under one field owner.
package controllers
