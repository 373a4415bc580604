"""splitbrain: a chaos lab for reliable-delivery protocols.

The subpackages are the repository's top-level folders (node/, harness/, faults/, pipeline/),
reached here through links so that a checkout and an installed wheel import the same names:
`splitbrain.node` (the protocol node), `splitbrain.harness` (clusters, scenarios, checks, CLI),
`splitbrain.faults` (fault injectors) and `splitbrain.pipeline` (the Spark analysis).
"""
