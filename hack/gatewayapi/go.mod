// Pins the Gateway API release whose standard-channel CRDs the integration tests install
// (enclave_testing.gatewayapi reads the version here and the module's hashes from go.sum).
module enclave.dev/hack/gatewayapi

go 1.26.0

require sigs.k8s.io/gateway-api v1.6.3
