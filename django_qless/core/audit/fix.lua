-- The keyspace: KEYS[1] is a shard's prefix 'ql:{<tag>}:' (so the call runs on the node of its
-- slot), none for the default 'ql:'. A shard on Redis/Valkey 7+ publishes with SPUBLISH, as the
-- engine does. A queue's throttle id is 'ql:q:<queue>' in every keyspace (an id, not a key).
local P = KEYS[1] or 'ql:'
local PUB = (KEYS[1] and (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000) and 'SPUBLISH'
  or 'PUBLISH'
local QTID = 'ql:q:'
local op, now = ARGV[1], tonumber(ARGV[2])
local rc = redis.call
local out = {}
local function note(s) table.insert(out, s) end
local function list(text)
  if not text or text == '' then return {} end
  local ok, v = pcall(cjson.decode, text)
  if ok and type(v) == 'table' then return v end
  return {}
end
local function group_of(text)
  local ok, v = pcall(cjson.decode, text or '')
  if ok and type(v) == 'table' and type(v.group) == 'string' and v.group ~= '' then
    return v.group
  end
  return nil
end
local function has(t, x)
  for _, v in ipairs(t) do if v == x then return true end end
  return false
end
local function score(priority, t) return priority - t / 10000000000 end
local function to_work(jid, queue, priority)
  rc('ZADD', P .. 'q:' .. queue .. '-work', score(tonumber(priority) or 0, now), jid)
  rc('HSET', P .. 'j:' .. jid, 'state', 'waiting')
  rc(PUB, P .. 'wake:' .. queue, queue)
end
local function undepend(jid)
  local h = rc('HMGET', P .. 'j:' .. jid, 'state', 'queue', 'priority', 'scheduled')
  if h[1] ~= 'depends' or not h[2] or h[2] == '' then return end
  if rc('SCARD', P .. 'j:' .. jid .. '-dependencies') > 0 then return end
  rc('ZREM', P .. 'q:' .. h[2] .. '-depends', jid)
  rc('HDEL', P .. 'j:' .. jid, 'scheduled')
  if tonumber(h[4]) then
    rc('ZADD', P .. 'q:' .. h[2] .. '-scheduled', tonumber(h[4]), jid)
    rc('HSET', P .. 'j:' .. jid, 'state', 'scheduled')
    rc('HDEL', P .. 'config', '#due:' .. h[2])
  else
    to_work(jid, h[2], h[3])
  end
  note('released ' .. jid .. ' from depends')
end
local function admit(tid)
  local max = tonumber(rc('HGET', P .. 'th:' .. tid, 'maximum')) or 0
  local room = 10
  if max > 0 then room = max - rc('ZCARD', P .. 'th:' .. tid .. '-locks') end
  if room <= 0 then return end
  for _, jid in ipairs(rc('ZRANGE', P .. 'th:' .. tid .. '-pending', 0, room - 1)) do
    rc('ZREM', P .. 'th:' .. tid .. '-pending', jid)
    local h = rc('HMGET', P .. 'j:' .. jid, 'state', 'queue', 'priority')
    if h[1] == 'throttled' and h[2] and h[2] ~= '' then
      rc('ZREM', P .. 'q:' .. h[2] .. '-throttled', jid)
      to_work(jid, h[2], h[3])
      note('admitted ' .. jid .. ' waiting on ' .. tid)
    end
  end
end
local EXPECT = { waiting = 'work', stalled = 'work', running = 'locks', scheduled = 'scheduled',
  depends = 'depends', throttled = 'throttled' }

local function reindex(jid)
  local key = P .. 'j:' .. jid
  local f = rc('HMGET', key, 'state', 'queue', 'worker', 'expires', 'priority', 'failure',
    'grace', 'throttles', 'held', 'tags')
  local state, queue, worker, expires = f[1], f[2] or '', f[3] or '', tonumber(f[4])
  if not state then return end
  if state == 'running' and (worker == '' or not expires or expires <= 0) then
    state = 'stalled'
    rc('HSET', key, 'state', 'stalled', 'expires', 0)
    note('stalled ' .. jid .. ' (running without a lease)')
  end
  if state ~= 'running' and worker ~= '' then
    rc('HSET', key, 'worker', '')
    rc('ZREM', P .. 'w:' .. worker .. ':jobs', jid)
    note('cleared worker of ' .. jid)
  end
  local expected = EXPECT[state]
  if queue ~= '' then
    for _, kind in ipairs({ 'work', 'locks', 'scheduled', 'depends', 'throttled' }) do
      local k = P .. 'q:' .. queue .. '-' .. kind
      local s = rc('ZSCORE', k, jid)
      if kind ~= expected and s then
        rc('ZREM', k, jid); note('removed ' .. jid .. ' from ' .. k)
      elseif kind == expected then
        local inf = s and tonumber(s) == math.huge
        if state == 'stalled' and not inf then
          rc('ZADD', k, '+inf', jid); note('put stalled ' .. jid .. ' at +inf in ' .. k)
        elseif state == 'waiting' and (not s or inf) then
          to_work(jid, queue, f[5]); note('re-indexed ' .. jid .. ' in ' .. k)
        elseif not s and kind == 'locks' then
          rc('ZADD', k, expires, jid); rc('HDEL', P .. 'config', '#due:' .. queue)
          note('re-indexed ' .. jid .. ' in ' .. k)
        elseif not s and kind ~= 'throttled' then
          rc('ZADD', k, now, jid); rc('HDEL', P .. 'config', '#due:' .. queue)
          note('re-indexed ' .. jid .. ' in ' .. k)
        end
      end
    end
  end
  if state == 'throttled' and queue ~= '' then
    local pending = false
    local tids = list(f[8]); table.insert(tids, QTID .. queue)
    for _, tid in ipairs(tids) do
      if rc('ZSCORE', P .. 'th:' .. tid .. '-pending', jid) then pending = true end
    end
    if not pending then
      rc('ZREM', P .. 'q:' .. queue .. '-throttled', jid)
      to_work(jid, queue, f[5]); note('moved throttled ' .. jid .. ' (no pending entry) to work')
    end
  end
  local wkey = P .. 'w:' .. worker .. ':jobs'
  if state == 'running' and f[7] ~= '1' and rc('ZSCORE', wkey, jid) == false then
    rc('ZADD', wkey, expires, jid); note('re-indexed ' .. jid .. ' under ' .. worker)
  end
  if state == 'failed' then
    local g = group_of(f[6])
    if g then
      local pos = rc('LPOS', P .. 'f:' .. g, jid, 'COUNT', 0)
      if #pos ~= 1 then
        rc('LREM', P .. 'f:' .. g, 0, jid); rc('LPUSH', P .. 'f:' .. g, jid)
        note('listed ' .. jid .. ' once in ' .. P .. 'f:' .. g)
      end
      rc('SADD', P .. 'failures', g)
    end
  end
  if state == 'complete' and rc('ZSCORE', P .. 'completed', jid) == false then
    rc('ZADD', P .. 'completed', now, jid); note('re-indexed ' .. jid .. ' in ' .. P .. 'completed')
  end
  local deps = rc('SMEMBERS', key .. '-dependencies')
  if state ~= 'depends' and #deps > 0 then
    for _, d in ipairs(deps) do rc('SREM', P .. 'j:' .. d .. '-dependents', jid) end
    rc('DEL', key .. '-dependencies'); note('dropped dependencies of ' .. state .. ' ' .. jid)
  elseif state == 'depends' then
    undepend(jid)
  end
  for _, tag in ipairs(list(f[10])) do
    if rc('ZSCORE', P .. 't:' .. tag, jid) == false then
      rc('ZADD', P .. 't:' .. tag, now, jid)
      rc('ZADD', P .. 'tags', rc('ZCARD', P .. 't:' .. tag), tag)
      note('indexed tag ' .. tag .. ' of ' .. jid)
    end
  end
  local tracked = rc('ZSCORE', P .. 'tracked', jid) ~= false
  if tracked and rc('HGET', key, 'tracked') ~= '1' then
    rc('HSET', key, 'tracked', 1); note('marked ' .. jid .. ' tracked')
  elseif not tracked and rc('HDEL', key, 'tracked') == 1 then
    note('marked ' .. jid .. ' untracked')
  end
  local held = list(f[9])
  if state ~= 'running' and f[9] and f[9] ~= '' then
    rc('HSET', key, 'held', '')
    for _, tid in ipairs(held) do
      rc('ZREM', P .. 'th:' .. tid .. '-locks', jid); admit(tid)
    end
    note('released throttles of ' .. state .. ' ' .. jid)
  elseif state == 'running' and #held > 0 then
    -- A slot released under a running job (throttle.release, a repair): forget it rather
    -- than take it back, which could push the throttle over its maximum.
    local kept, gone = {}, {}
    for _, tid in ipairs(held) do
      if rc('ZSCORE', P .. 'th:' .. tid .. '-locks', jid) then
        table.insert(kept, tid)
      else
        table.insert(gone, tid)
      end
    end
    if #gone > 0 then
      rc('HSET', key, 'held', #kept > 0 and cjson.encode(kept) or '')
      note('dropped released throttles from ' .. jid)
      for _, tid in ipairs(gone) do admit(tid) end -- the freed slot may admit a waiter
    end
  end
end

local KIND_STATES = { work = { 'waiting', 'stalled' }, locks = { 'running' },
  scheduled = { 'scheduled' }, depends = { 'depends' }, throttled = { 'throttled' } }

-- Does member `jid` belong in index `kind` owned by `owner` (queue, group, worker, tid, tag)?
local function belongs(kind, owner, jid)
  local h = rc('HMGET', P .. 'j:' .. jid, 'state', 'queue', 'worker', 'failure', 'held', 'tags')
  if not h[1] then return kind == 'recur' and rc('HGET', P .. 'r:' .. jid, 'queue') == owner end
  if not EXPECT[h[1]] and h[1] ~= 'failed' and h[1] ~= 'complete' then return true end
  if KIND_STATES[kind] then return has(KIND_STATES[kind], h[1]) and h[2] == owner end
  if kind == 'completed' then return h[1] == 'complete' end
  if kind == 'failed' then return h[1] == 'failed' and group_of(h[4]) == owner end
  if kind == 'worker' then return h[1] == 'running' and h[3] == owner end
  if kind == 'thlocks' then return h[1] == 'running' and has(list(h[5]), owner) end
  if kind == 'thpending' then return h[1] == 'throttled' end
  if kind == 'tag' then return has(list(h[6]), owner) end
  if kind == 'tracked' then return true end
  return true
end

if op == 'reindex' then
  reindex(ARGV[3])
elseif op == 'drop' then
  local key, kind, owner, jid = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
  if not belongs(kind, owner, jid) then
    local t = rc('TYPE', key)['ok']
    if t == 'zset' then rc('ZREM', key, jid) elseif t == 'list' then rc('LREM', key, 0, jid)
    else rc('SREM', key, jid) end
    note('dropped ' .. jid .. ' from ' .. key)
    if kind == 'thlocks' then admit(owner) end
    if kind == 'tag' then
      local n = rc('ZCARD', key)
      if n == 0 then rc('ZREM', P .. 'tags', owner) else rc('ZADD', P .. 'tags', n, owner) end
    end
    if kind == 'failed' and rc('LLEN', key) == 0 then rc('SREM', P .. 'failures', owner) end
  end
  reindex(jid)
elseif op == 'tagcount' then
  local tag = ARGV[3]
  local n = rc('ZCARD', P .. 't:' .. tag)
  if n == 0 then rc('ZREM', P .. 'tags', tag) else rc('ZADD', P .. 'tags', n, tag) end
  note('recounted tag ' .. tag .. ' = ' .. n)
elseif op == 'failures' then
  local g = ARGV[3]
  if rc('LLEN', P .. 'f:' .. g) > 0 then rc('SADD', P .. 'failures', g)
  else rc('SREM', P .. 'failures', g) end
  note('synced ' .. P .. 'failures for ' .. g)
elseif op == 'meta' then
  -- Drop a hidden bookkeeping field: the engine recomputes it on the next pop.
  rc('HDEL', P .. 'config', ARGV[3])
  note('reset ' .. P .. 'config ' .. ARGV[3])
elseif op == 'edge' then
  -- ARGV[3] depends on ARGV[4]: keep the edge only if both sides still make sense.
  local a, b = ARGV[3], ARGV[4]
  local sa, sb = rc('HGET', P .. 'j:' .. a, 'state'), rc('HGET', P .. 'j:' .. b, 'state')
  if sa == 'depends' and sb and sb ~= 'complete' then
    rc('SADD', P .. 'j:' .. a .. '-dependencies', b); rc('SADD', P .. 'j:' .. b .. '-dependents', a)
    note('restored edge ' .. a .. ' -> ' .. b)
  else
    rc('SREM', P .. 'j:' .. a .. '-dependencies', b); rc('SREM', P .. 'j:' .. b .. '-dependents', a)
    note('dropped edge ' .. a .. ' -> ' .. b)
    if sa == 'depends' then undepend(a) end
  end
elseif op == 'orphan' then
  local key, jid = ARGV[3], ARGV[4]
  if rc('EXISTS', P .. 'j:' .. jid) == 0 then
    if key == P .. 'j:' .. jid .. '-dependents' then
      for _, d in ipairs(rc('SMEMBERS', key)) do
        rc('SREM', P .. 'j:' .. d .. '-dependencies', jid); undepend(d)
      end
    elseif key == P .. 'j:' .. jid .. '-dependencies' then
      for _, d in ipairs(rc('SMEMBERS', key)) do rc('SREM', P .. 'j:' .. d .. '-dependents', jid) end
    end
    rc('DEL', key); note('deleted orphan ' .. key)
  end
elseif op == 'recur' then
  local jid = ARGV[3]
  local queue = rc('HGET', P .. 'r:' .. jid, 'queue')
  if queue and rc('ZSCORE', P .. 'q:' .. queue .. '-recur', jid) == false then
    rc('ZADD', P .. 'q:' .. queue .. '-recur', now, jid)
    rc('HDEL', P .. 'config', '#due:' .. queue)
    note('re-indexed recurring ' .. jid .. ' in ' .. P .. 'q:' .. queue .. '-recur')
  end
end
return out
