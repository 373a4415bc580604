"""JGroups 2.12 as a node implementation: a Java process around a real JChannel (java/), built
with javac against the JGroups jar (build.sh), started and judged through the node contract
(docs/node-contract.md). Nothing here re-implements a JGroups protocol."""
