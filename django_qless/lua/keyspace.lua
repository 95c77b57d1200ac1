-- keyspace.lua: the names of the call's keyspace (first in the script: every file builds its
-- key and channel names from KP and K).
--
--@ helpers
--
-- Commands: none. Keys: none (names only). main() (api.lua) checks KEYS[1] and Q.begin
-- (base.lua) switches KP and K when a call's keyspace differs from the previous call's.

-- The call's keyspace. Every key and channel name is KP .. <name>: KP is 'ql:' (the default
-- keyspace, qless-core's layout) or a shard prefix 'ql:{<tag>}:' passed as KEYS[1], which puts
-- every key of the call in the tag's cluster slot. K holds the keyspace's fixed key and channel
-- names, its publish flavour and its name caches: one table per prefix, kept across calls as a
-- Redis 7 function, so calls on two keyspaces of one server never share a cached name.
-- Sharded pub/sub (SPUBLISH, PUBSUB SHARDNUMSUB) exists from Redis 7.0 (Valkey has it too); a
-- shard on an older server publishes plainly. The default keyspace always publishes plainly,
-- as stock clients expect.
local SHARDED_PUBSUB = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000
-- The default keyspace's table as one constructor of constants (under EVALSHA the script body
-- runs on every call: no concatenation here).
local KP = 'ql:'
local K = { config = 'ql:config', queues = 'ql:queues', completed = 'ql:completed',
  workers = 'ql:workers', tracked = 'ql:tracked', tags = 'ql:tags', failures = 'ql:failures',
  paused_queues = 'ql:paused_queues', idle = 'ql:idle', log = 'ql:log', failed = 'ql:failed',
  put = 'ql:put', popped = 'ql:popped', stalled = 'ql:stalled', track = 'ql:track',
  untrack = 'ql:untrack', canceled = 'ql:canceled', pub = 'PUBLISH', numsub = 'NUMSUB',
  qn = {}, nq = 0, ww = nil, wk = nil }
local DEFAULT_K = K
-- The shards' tables (made on the first shard call: nothing to allocate for the default).
-- At most MAX_KEYSPACES, then all are dropped and made again as calls come: as many as the
-- shard tags a deployment can have (core/cluster/placement.py), since one cluster primary may hold
-- every shard, and calls alternating over more keyspaces than the bound would drop every
-- table (its name caches and memos) again and again.
local keyspaces, nkeyspaces = nil, 0
local MAX_KEYSPACES = 1024

-- The K table of `prefix` (a valid shard prefix, checked by main()).
local function keyspace(prefix)
  if prefix == 'ql:' then return DEFAULT_K end
  local k = keyspaces and keyspaces[prefix]
  if k then return k end
  if not keyspaces or nkeyspaces >= MAX_KEYSPACES then keyspaces, nkeyspaces = {}, 0 end
  k = { qn = {}, nq = 0, pub = SHARDED_PUBSUB and 'SPUBLISH' or 'PUBLISH',
    numsub = SHARDED_PUBSUB and 'SHARDNUMSUB' or 'NUMSUB' }
  -- (the fixed names of the default table, built here: under EVALSHA a list at the top level
  -- would be allocated on every call)
  for name, v in pairs(DEFAULT_K) do
    if name ~= 'wk' and type(v) == 'string' and v:sub(1, 3) == 'ql:' then
      k[name] = prefix .. v:sub(4)
    end
  end
  keyspaces[prefix] = k
  nkeyspaces = nkeyspaces + 1
  return k
end
