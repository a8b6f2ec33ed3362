"""ResourcePool and ResourcePoolClaim admission: assignment (mutation) and the pool fences (validation)."""
