-- objects.lua: the `objects` loader (job objects as replies, history read back) and the
-- `stats` loader (wait/run statistics batched per call).
--
-- Commands: none (helpers only).
-- Keys:
--   ql:j:<jid>                     hash  (HMGET)
--   ql:j:<jid>-history             list  (LRANGE)
--   ql:j:<jid>-dependents|dependencies  set (SMEMBERS)
--   ql:tracked                     zset  (ZSCORE, for `get`)
--   ql:s:wait|run:<day>:<queue>    hash  wait/run statistics (HMGET + HSET once per call)

-- ---------------------------------------------------------------- job objects (module)

Q.mod.objects = function()
  -- History objects of the list followed by the legacy field's entries. `compact`
  -- ({put time, queue, pop time, worker}, from a pop that just extended a bare first put)
  -- means there is no list to read: the two objects are built as the list form decodes them.
  function Q.read_history(jid, legacy, compact, listed)
    if compact then
      local put = { when = compact[1], what = 'put' }
      put.q = compact[2]
      local popped = { when = compact[3], what = 'popped' }
      popped.worker = compact[4]
      return { put, popped }
    end
    local out = {}
    -- `listed`: the list's whole content, known from the RPUSH that created it.
    local raws = listed or rcall('LRANGE', Q.khist(jid), 0, -1)
    if legacy then
      for _, e in ipairs(Q.legacy_entries(legacy)) do tinsert(raws, e) end
    end
    for _, raw in ipairs(raws) do
      local ok, e = pcall(cjson_decode, raw)
      if ok and type(e) == 'table' then
        if e[2] ~= nil then
          local obj = { when = e[1], what = e[2] }
          if type(e[3]) == 'table' then
            for k, v in pairs(e[3]) do obj[k] = v end
          end
          tinsert(out, obj)
        else
          tinsert(out, e)
        end
      end
    end
    return out
  end


  -- Build the JSON-ready job object from a hash read with Q.ALL (lean: no history/deps).
  -- Reads never migrate a legacy/compact `history` field: they expand it after the list.
  function Q.job_object(jid, h, tracked, lean)
    local failure = {}
    if h.failure and h.failure ~= '' and h.failure ~= '{}' then
      local ok, f = pcall(cjson_decode, h.failure)
      if ok and type(f) == 'table' then failure = f end
    end
    local remaining = tonumber(h.remaining) or 0
    local obj = {
      jid = jid,
      klass = h.klass or '',
      state = h.state or '',
      queue = h.queue or '',
      worker = h.worker or '',
      tracked = tracked,
      priority = tonumber(h.priority) or 0,
      expires = tonumber(h.expires) or 0,
      retries = tonumber(h.retries) or 0,
      remaining = floor(remaining),
      data = h.data or '{}',
      tags = Q.list(h.tags),
      failure = failure,
      spawned_from_jid = h.spawned_from_jid or false,
      throttles = Q.list(h.throttles),
    }
    if not lean then
      obj.history = Q.read_history(jid, h.history, h.compact, h.listed)
      -- Most jobs have neither set: one EXISTS instead of two SMEMBERS.
      local empty = {}
      obj.dependents, obj.dependencies = empty, empty
      if rcall('EXISTS', Q.kdents(jid), Q.kdeps(jid)) > 0 then
        obj.dependents = rcall('SMEMBERS', Q.kdents(jid))
        obj.dependencies = rcall('SMEMBERS', Q.kdeps(jid))
      end
    end
    return obj
  end

  -- Full job object for a jid, or nil.
  function Q.get(jid)
    local h = Q.read(jid, Q.ALL)
    if not h then return nil end
    return Q.job_object(jid, h, Q.tracked(jid), false)
  end
end

-- ---------------------------------------------------------------- statistics (module)

Q.mod.stats = function()

  local function bucket(value)
    local v = floor(value)
    if v < 60 then return 's' .. v end
    if v < 3600 then return 'm' .. floor(v / 60) end
    if v < 86400 then return 'h' .. floor(v / 3600) end
    return 'd' .. floor(v / 86400)
  end
  Q.bucket = bucket

  -- Queue a wait/run sample; Q.flush_stats writes each stats hash once per call.
  local bin_t, bin_s  -- the last day bin's text: one format per call, not per sample
  function Q.sample(kind, queue, now, value)
    local bin = Q.bin(now)
    if bin ~= bin_t then bin_t, bin_s = bin, tostring(bin) end
    local key = 'ql:s:' .. kind .. ':' .. bin_s .. ':' .. queue
    local acc = Q.stats_acc[key]
    if not acc then
      acc = {}
      Q.stats_acc[key] = acc
      tinsert(Q.stats_order, key)
    end
    tinsert(acc, value)
  end

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
    rcall('HSET', key, 'total', Q.int_arg(count), 'mean', mean, 'vk', vk,
      b, Q.int_arg((tonumber(cur[4]) or 0) + 1))
  end

  -- Several samples for one hash (a pop of many jobs): still one HMGET and one HSET.
  local function flush_many(key, samples)
    local fields = { 'total', 'mean', 'vk' }
    local index = {}
    for _, v in ipairs(samples) do
      local b = bucket(v)
      if not index[b] then tinsert(fields, b); index[b] = #fields end
    end
    local cur = rcall('HMGET', key, unpack(fields))
    local count = tonumber(cur[1]) or 0
    local mean = tonumber(cur[2]) or 0
    local vk = tonumber(cur[3]) or 0
    local hist = {}
    for _, v in ipairs(samples) do
      count = count + 1
      if count == 1 then
        mean = v; vk = 0
      else
        local old = mean
        mean = mean + (v - mean) / count
        vk = vk + (v - mean) * (v - old)
      end
      local b = bucket(v)
      hist[b] = (hist[b] or 0) + 1
    end
    local args = { 'total', count, 'mean', mean, 'vk', vk }
    for b, i in pairs(index) do
      tinsert(args, b)
      tinsert(args, (tonumber(cur[i]) or 0) + hist[b])
    end
    rcall('HSET', key, unpack(args))
  end

  function Q.flush_stats()
    local order = Q.stats_order
    if not order[1] then return end
    for _, key in ipairs(order) do
      local samples = Q.stats_acc[key]
      if samples[2] == nil then flush_one(key, samples[1]) else flush_many(key, samples) end
    end
    Q.stats_acc = {}
    Q.stats_order = {}
  end
end
