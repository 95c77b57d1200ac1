-- samples.lua: wait/run statistics samples, batched per call (the `stats` command that reads
-- them back is in queries.lua).
--
-- Commands: none (helpers only).
-- Keys:
--   ql:s:wait|run:<day>:<queue>    hash  wait/run statistics (HMGET + HSET once per call)

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

  -- (the batch is emptied in place: the tables live across calls as a Redis 7 function)
  function Q.flush_stats()
    local order = ctx.stats_order
    if not order[1] then return end
    local acc = ctx.stats_acc
    for i, key in ipairs(order) do
      local samples = acc[key]
      if type(samples) == 'number' then flush_one(key, samples) else flush_many(key, samples) end
      acc[key] = nil
      order[i] = nil
    end
  end
end
