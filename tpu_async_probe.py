import os, jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
print(jax.__version__, jax.devices())
out = os.environ.get("OUT", ".")
for name in ["v5e:2x4", "v5e:2x2"]:
    try:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=name)
        devs = np.array(topo.devices)
        print(name, len(devs))
        mesh = Mesh(devs.reshape(2, -1), ("a", "b"))
        nb = mesh.shape["b"]
        def body(x):
            y = jax.lax.psum(x, "b")
            g = jax.lax.all_gather(x, "a", tiled=True)
            p = jax.lax.ppermute(x, "b", perm=[(i, (i + 1) % nb) for i in range(nb)])
            z = jax.lax.fori_loop(0, 5, lambda i, v: v + jax.lax.psum(v, "a"), y)
            return z, g[:x.shape[0]] + p
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("a", "b"), out_specs=(P("a", "b"), P("a", "b"))))
        arg = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P("a", "b")))
        text = f.lower(arg).compile().as_text()
        open(f"{out}/{name.replace(':', '_')}.hlo", "w").write(text)
        print([l.strip()[:240] for l in text.splitlines() if "-start" in l or "-done" in l or " while(" in l])
        break
    except Exception as e:
        print(name, "failed", type(e).__name__, str(e)[:500])
