"""Sharding, in one home: how a multi-device program's values are split over its devices,
and what each device runs.

Its modules, each one concern, the lower ones first:

* :mod:`.tiling`: meshes and shardings (Shardy's and HLO's) decoded into tilings, which
  part of a global value each device holds; :mod:`.unreduced`: values held as partial
  sums, one per device group;
* :mod:`.shardy` (its child :mod:`.shardy_child`): Shardy's own propagation run on a
  module; :mod:`.propagation`: the shardings it finds, mapped onto a program's values;
* :mod:`.manual_borders`, :mod:`.custom_partitioning`: the rewrites that tell an op its
  shardings before the module is compiled (the GSPMD borders of ``shard_map``; JAX's
  ``custom_partitioning``, and the callbacks asked for its per-device program);
* :mod:`.partition`: the per-device program Shardy's partitioner makes, in a child
  process whose pipeline is a list of small named steps (:mod:`.partition.child`);
* :mod:`.per_device`: that program run on the process grid, each device on its shards;
  :mod:`.check`: a per-device run judged against the global run;
* :mod:`.traffic`: the bytes each device sends and receives at each collective.

The op families that compute on shardings (``sdy`` ops, the sharding custom calls, the
partitioned host callbacks) are in ops/; the tools that show each device's view in
tools/; the device's per-device modes in device/placement.py.
"""
