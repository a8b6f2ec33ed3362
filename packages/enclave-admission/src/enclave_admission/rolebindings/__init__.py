"""The RoleBindings Enclave keeps in tenant namespaces: who may change them."""
