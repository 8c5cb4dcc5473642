"""Deployment: the KubeRay manifests (kuberay/) and a local multi-node Ray cluster."""
