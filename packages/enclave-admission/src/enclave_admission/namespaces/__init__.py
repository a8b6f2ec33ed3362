"""Namespaces: assignment to tenants (:mod:`.mutation`, choosing with :mod:`.assignment`), the tenant fence around
them (:mod:`.validation`), and the tenant's namespace quota an admission is confirmed on (:mod:`.quota`)."""
