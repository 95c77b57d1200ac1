-- samples.lua: wait/run statistics samples, batched per call (the `stats` command that reads
-- them back is in queries.lua).
--
-- Commands: none (helpers only).
-- Keys:
--   ql:s:wait|run:<day>:<queue>    hash  wait/run statistics (HMGET + HSET once per call under
--                                        EVALSHA; held and written out about once a second
--                                        per hash as a Redis 7 function, below)
--   ql:config                      hash  `#marks`: the keyspace's generation tag (HMGET/HGET)

Q.mod.samples = function()

  -- Histogram field names by unit and count, made once each: `'s' .. n` formats the number
  -- with printf on every call (kept across calls as a Redis 7 function; at most 148 names).
  local names = { s = {}, m = {}, h = {}, d = {} }
  local function name(unit, n)
    local by = names[unit]
    local text = by[n]
    if not text then
      text = unit .. n
      if n >= 0 and n < 60 then by[n] = text end
    end
    return text
  end

  local function bucket(value)
    local v = floor(value)
    if v < 60 then return names.s[v] or name('s', v) end
    if v < 3600 then return name('m', floor(v / 60)) end
    if v < 86400 then return name('h', floor(v / 3600)) end
    return name('d', floor(v / 86400))
  end
  Q.bucket = bucket

  -- Queue a wait/run sample; Q.flush_stats writes each stats hash once per call. A hash's
  -- one sample is kept as the number itself, several in a list (no table for the usual one).
  local bin_t, bin_s  -- the last day bin's text: one format per call, not per sample
  function Q.sample(kind, queue, now, value)
    -- A span is never negative: times are stored rounded to the millisecond (Q.ftime), so a
    -- pop within half a millisecond of its put would otherwise land in no bucket ('s-1').
    if value < 0 then value = 0 end
    local bin = floor(now - now % 86400)  -- (Q.bin, without a call)
    if bin ~= bin_t then bin_t, bin_s = bin, tostring(bin) end
    local key = KP .. 's:' .. kind .. ':' .. bin_s .. ':' .. queue
    local acc = ctx.stats_acc[key]
    if acc == nil then
      ctx.stats_acc[key] = value
      tinsert(ctx.stats_order, key)
    elseif type(acc) == 'number' then
      ctx.stats_acc[key] = { acc, value }
    else
      tinsert(acc, value)
    end
  end

  -- The histogram counts of `samples`: bucket name -> count, and the names in first-seen order.
  local function histogram(samples)
    local hist, seen = {}, {}
    for _, v in ipairs(samples) do
      local b = bucket(v)
      local n = hist[b]
      if n then hist[b] = n + 1 else hist[b] = 1; seen[#seen + 1] = b end
    end
    return hist, seen
  end

  -- Fold `samples` into a stored count, mean and vk (Welford's update, one sample at a time
  -- in the order taken): the very arithmetic a write of each call's samples would have done,
  -- so holding samples and writing them later (or `stats` merging them) gives the same doubles.
  local function welford(count, mean, vk, samples)
    for _, v in ipairs(samples) do
      count = count + 1
      if count == 1 then
        mean = v; vk = 0
      else
        local old = mean
        mean = mean + (v - mean) / count
        vk = vk + (v - mean) * (v - old)
      end
    end
    return count, mean, vk
  end
  Q.welford, Q.histogram = welford, histogram

  -- One sample (the worker's pop and complete): one HMGET and one HSET of four fields.
  local function flush_one(key, v)
    local b = bucket(v)
    local cur = rcall('HMGET', key, 'total', 'mean', 'vk', b)
    local count = (tonumber(cur[1]) or 0) + 1
    local mean, vk = v, 0
    if count > 1 then
      local old = tonumber(cur[2]) or 0
      mean = old + (v - old) / count
      vk = (tonumber(cur[3]) or 0) + (v - mean) * (v - old)
    end
    -- (both counts are integers from 1 up: '%d' directly, as Q.int_arg would write them)
    local n = (tonumber(cur[4]) or 0) + 1
    rcall('HSET', key, 'total',
      count >= 1 and count < 1e15 and count == floor(count) and sformat('%d', count)
        or Q.int_arg(count),
      'mean', mean, 'vk', vk,
      b, n >= 1 and n < 1e15 and n == floor(n) and sformat('%d', n) or Q.int_arg(n))
  end

  -- Several samples for one hash (a pop of many jobs, or held samples): still one HMGET and
  -- one HSET.
  local function flush_many(key, samples)
    local hist, seen = histogram(samples)
    local cur = rcall('HMGET', key, 'total', 'mean', 'vk', unpack(seen))
    local count, mean, vk = welford(tonumber(cur[1]) or 0, tonumber(cur[2]) or 0,
      tonumber(cur[3]) or 0, samples)
    local args = { 'total', count, 'mean', mean, 'vk', vk }
    for i, b in ipairs(seen) do
      args[#args + 1] = b
      args[#args + 1] = (tonumber(cur[i + 3]) or 0) + hist[b]
    end
    rcall('HSET', key, unpack(args))
  end

  local function write(key, samples)
    if type(samples) == 'number' then flush_one(key, samples)
    elseif samples[2] then flush_many(key, samples)
    else flush_one(key, samples[1]) end
  end

  -- Held samples. As a Redis 7 function (or Valkey's) the engine keeps its Lua state across
  -- calls, so a call's samples are held in memory and each held hash is written out at most
  -- about once a second: thousands of jobs cost one HMGET + HSET per hash per second instead
  -- of one per job. Under EVALSHA nothing survives a call: every call writes its own samples.
  --
  -- One Lua state serves every database of the server and, in a cluster node, every shard
  -- keyspace, so samples are held per generation: the keyspace prefix KP and the tag of the
  -- keyspace's `#marks` config field (Q.generation; queuescan.lua's known-empty marks use it too).
  -- Only a call of that generation (its KP, and a ql:config holding that tag) writes them
  -- out, so a FLUSHALL, FLUSHDB or a deleted ql:config (a new tag, or none) leaves them
  -- behind for good: a flushed database never gets stats keys back. Only calls that read the
  -- tag check for due write-outs (pop, reserve, reserve.wait, complete, complete.reserve,
  -- reap, hand-offs): `stats` runs read-only and merges the held samples instead (queries.lua).
  --   held[KP][tag] = g: { kp, tag, acc = { key -> list of samples }, order = { keys },
  --                        oldest = `now` of its first sample, used = tick of its last call }
  -- Bounds per generation (so one database's load never changes another's): a generation
  -- past them is written out at once; so is a call's generation when all of them together
  -- hold more than MAX_HELD samples or MAX_HELD_HASHES hashes (a few MB of Lua memory at
  -- most). At most MAX_GENS generations: as many as the shard tags a deployment can have
  -- (core/cluster/placement.py), since one cluster primary may hold every shard and each live shard
  -- must keep its samples until its next call.
  local GEN = '#marks'
  local MAX_HASHES, MAX_SAMPLES, MAX_GENS = 256, 8192, 1024
  local MAX_HELD, MAX_HELD_HASHES = 65536, 16384
  local held, ngens, tick = {}, 0, 0
  local nsamples, nhashes = 0, 0  -- (held by all generations)
  -- False until the first call of this Lua state ends: that call writes through (under
  -- EVALSHA every call is the first, since the script body, and this, runs anew each call).
  local holding = false

  local function drop(g)
    local by_tag = held[g.kp]
    by_tag[g.tag] = nil
    if next(by_tag) == nil then held[g.kp] = nil end
    ngens = ngens - 1
    nsamples, nhashes = nsamples - g.n, nhashes - #g.order
  end

  -- Write out a generation of the call's keyspace (one HMGET + HSET per hash) and forget it.
  local function write_out(g)
    drop(g)
    local acc = g.acc
    for _, key in ipairs(g.order) do write(key, acc[key]) end
  end

  -- A generation is due when its oldest sample is >= 1 s from the call's `now` (either way:
  -- a caller's clock may move back).
  local function due(g)
    local age = ctx.now - g.oldest
    return age >= 1 or age <= -1
  end

  -- The held generation of this call's keyspace and `tag`, made if need be. Past MAX_GENS the
  -- least recently used one is dropped unwritten: a generation that no call has named while
  -- 1024 others held samples is almost surely a flushed database's.
  local function generation(tag)
    local by_tag = held[KP]
    local g = by_tag and by_tag[tag]
    if g then return g end
    if ngens >= MAX_GENS then
      local lru
      for _, tags in pairs(held) do
        for _, other in pairs(tags) do
          if not lru or other.used < lru.used then lru = other end
        end
      end
      drop(lru)
      by_tag = held[KP]
    end
    if not by_tag then by_tag = {}; held[KP] = by_tag end
    g = { kp = KP, tag = tag, acc = {}, order = {}, oldest = ctx.now, used = 0, n = 0 }
    by_tag[tag] = g
    ngens = ngens + 1
    return g
  end

  -- The held samples of this call's keyspace (key -> list), or nil: for `stats`, which runs
  -- read-only (FCALL_RO), so it reads the tag itself; with it in ctx.cfgv, Q.flush_stats
  -- would check for a write-out.
  function Q.held_stats()
    local by_tag = held[KP]
    if not by_tag then return nil end
    local tag = rcall('HGET', K.config, GEN)
    local g = tag and by_tag[tag]
    return g and g.acc
  end

  -- End of a call: hold its samples (or write them, on the first call of this Lua state) and
  -- write out the keyspace's held samples when due or past the bounds. The batch is emptied
  -- in place (the tables live across calls as a Redis 7 function).
  function Q.flush_stats()
    local order, acc = ctx.stats_order, ctx.stats_acc
    if not holding then
      holding = true
      for i, key in ipairs(order) do
        write(key, acc[key])
        acc[key] = nil
        order[i] = nil
      end
      return
    end
    local cfg = ctx.cfgv
    local tag = cfg and cfg[GEN]
    if not order[1] then
      local by_tag = tag and held[KP]
      local g = by_tag and by_tag[tag]
      if g and due(g) then write_out(g) end
      return
    end
    if tag == nil then tag = Q.cfgraw(GEN) end
    if not tag then tag = Q.generation() end
    local g = generation(tag)
    tick = tick + 1
    g.used = tick
    local gacc, gorder, n = g.acc, g.order, 0
    local hashes = #gorder
    for i, key in ipairs(order) do
      local samples = acc[key]
      local list = gacc[key]
      if not list then
        list = {}
        gacc[key] = list
        gorder[#gorder + 1] = key
      end
      if type(samples) == 'number' then
        list[#list + 1] = samples
        n = n + 1
      else
        for _, v in ipairs(samples) do list[#list + 1] = v end
        n = n + #samples
      end
      acc[key] = nil
      order[i] = nil
    end
    g.n = g.n + n
    nsamples, nhashes = nsamples + n, nhashes + #gorder - hashes
    if due(g) or #gorder > MAX_HASHES or g.n > MAX_SAMPLES or nsamples > MAX_HELD
      or nhashes > MAX_HELD_HASHES then
      write_out(g)
    end
  end
end
