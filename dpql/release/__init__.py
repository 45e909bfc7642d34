"""Releases once they leave the pipeline: the policy, the lifetime ledger, writing a release as
one unit, its provenance record, signatures and verification.

* :mod:`dpql.release.policy`: ``dpql check --policy`` (policy rules, lifetime caps);
* :mod:`dpql.release.lifetime`: the lifetime release ledger (locking, recovery);
* :mod:`dpql.release.project`: which policy and ledger a spec answers to (``dpql.yaml``);
* :mod:`dpql.release.ledger_report`: ``dpql ledger``;
* :mod:`dpql.release.commit`: writing a release as one unit (staging, pending/committed lines);
* :mod:`dpql.release.provenance`: records and their checks
  (:mod:`dpql.release.provenance_schema`: its JSON Schema);
* :mod:`dpql.release.curator`: the curator-only file;
* :mod:`dpql.release.signing`: Ed25519 record signatures;
* :mod:`dpql.release.verify`: ``dpql verify`` (re-plan, signature;
  :mod:`dpql.release.events`: the record's events against the plan's budget table).
"""
