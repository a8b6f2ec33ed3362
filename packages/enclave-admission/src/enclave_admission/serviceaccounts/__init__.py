"""ServiceAccounts: who may promote an account to tenant owner."""
