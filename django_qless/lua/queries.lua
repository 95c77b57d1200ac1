-- queries.lua: listing and managing queues, failures and statistics.
--
--@ command jobs timers
--@ command length
--@ command queues timers
--@ command pause
--@ command unpause
--@ command queue.forget
--@ command unfail
--@ command failed
--@ command stats
--
-- Commands (after `now`):
--   jobs         complete [offset] [count]          -> array of jids
--   jobs         running|stalled|scheduled|depends|recurring|waiting|throttled queue [offset] [count]
--   length       queue                              -> integer
--   queues       [queue]                            -> JSON (key "throttled" only when > 0)
--   pause|unpause|queue.forget  queue...            -> nil
--   unfail       queue group [count=25]             -> integer
--   failed       [group [start=0] [limit=25]]       -> JSON
--   stats        queue date                         -> JSON
--
-- Keys:
--   ql:q:<queue>-work|locks|scheduled|depends|recur|throttled  zset (ZRANGE*, ZCARD, ZCOUNT, ZADD)
--   ql:j:<jid>                 hash  (HMGET, HSET: unfail; via Q.history)
--   ql:paused_queues           set   (SISMEMBER, SADD, SREM)
--   ql:queues                  zset  (ZRANGE, ZREM)
--   ql:completed               zset  (ZREVRANGE)
--   ql:failures                set   (SMEMBERS, SREM)
--   ql:f:<group>               list  (LRANGE, LLEN, LTRIM)
--   ql:s:stats|wait|run:<day>:<queue>  hash (HMGET, HINCRBY; `stats` adds the samples held
--                              in memory, samples.lua)
--   ql:config                  hash  (HGET `#marks`: the generation of held samples)
--   channels: ql:wake:<queue>

Q.mod.queries = function()
  local rcall = Q.rcall
  local C = Q.commands


  C['jobs'] = { 'Jobs', function(now, args)
    local state = args[1]
    if state == 'complete' then
      local offset = Q.offset('offset', args[2])
      local count = Q.count(args[3], 0, 500, 25)
      if count == 0 then return {} end
      return rcall('ZREVRANGE', K.completed, offset, offset + count - 1)
    end
    local queue = Q.queue(args[2])
    local offset = Q.offset('offset', args[3])
    local count = Q.count(args[4], 0, 500, 25)
    local known = { running = 1, stalled = 1, scheduled = 1, depends = 1, recurring = 1,
      waiting = 1, throttled = 1 }
    if not known[state] then Q.fail('Unknown type "' .. tostring(state) .. '"') end
    if state == 'scheduled' then Q.promote(now, queue, nil, true) end
    if count == 0 then return {} end
    if state == 'running' then
      return rcall('ZRANGEBYSCORE', Q.kq(queue, 'locks'), now, '+inf', 'LIMIT', offset, count)
    elseif state == 'stalled' then
      return rcall('ZRANGEBYSCORE', Q.kq(queue, 'locks'), '-inf', now, 'LIMIT', offset, count)
    elseif state == 'recurring' then
      return rcall('ZRANGEBYSCORE', Q.kq(queue, 'recur'), 0, '+inf', 'LIMIT', offset, count)
    elseif state == 'waiting' then
      return rcall('ZREVRANGE', Q.kq(queue, 'work'), offset, offset + count - 1)
    end
    return rcall('ZRANGE', Q.kq(queue, state), offset, offset + count - 1)
  end }

  C['length'] = { 'Length', function(now, args)
    local queue = Q.queue(args[1])
    return rcall('ZCARD', Q.kq(queue, 'locks')) + rcall('ZCARD', Q.kq(queue, 'work'))
      + rcall('ZCARD', Q.kq(queue, 'scheduled'))
  end }

  local function queue_counts(now, queue)
    Q.promote(now, queue, nil, true)
    local stalled = rcall('ZCOUNT', Q.kq(queue, 'locks'), '-inf', now)
    local throttled = rcall('ZCARD', Q.kq(queue, 'throttled'))
    return {
      name = queue,
      waiting = rcall('ZCARD', Q.kq(queue, 'work')),
      stalled = stalled,
      running = rcall('ZCARD', Q.kq(queue, 'locks')) - stalled,
      scheduled = rcall('ZCARD', Q.kq(queue, 'scheduled')),
      depends = rcall('ZCARD', Q.kq(queue, 'depends')),
      recurring = rcall('ZCARD', Q.kq(queue, 'recur')),
      -- Only when there are some: stock clients compare counts with qless-core's exact set of
      -- keys, and only our throttle commands can make a job throttled (nil drops the key).
      throttled = throttled > 0 and throttled or nil,
      paused = rcall('SISMEMBER', K.paused_queues, queue) == 1,
    }
  end

  C['queues'] = { 'Queues', function(now, args)
    if args[1] then return cjson.encode(queue_counts(now, Q.queue(args[1]))) end
    local out = {}
    for _, queue in ipairs(rcall('ZRANGE', K.queues, 0, -1)) do
      table.insert(out, queue_counts(now, queue))
    end
    return cjson.encode(out)
  end }

  local function queue_args(args)
    local out = {}
    for i = 1, #args do table.insert(out, Q.queue(args[i])) end
    if #out == 0 then Q.fail('Arg "queue" missing') end
    if #out > Q.MAX_LIST then Q.fail('at most ' .. Q.MAX_LIST .. ' queues') end
    return out
  end

  C['pause'] = { 'Pause', function(now, args)
    local queues = queue_args(args)
    Q.chunked('SADD', K.paused_queues, queues)
  end }

  C['unpause'] = { 'Unpause', function(now, args)
    local queues = queue_args(args)
    Q.chunked('SREM', K.paused_queues, queues)
    for _, queue in ipairs(queues) do Q.wake(queue) end
  end }

  C['queue.forget'] = { 'Forget', function(now, args)
    Q.chunked('ZREM', K.queues, queue_args(args))
    K.listed = nil  -- (put.lua's queues known to be listed)
  end }

  C['unfail'] = { 'Unfail', function(now, args)
    local queue = Q.queue(args[1])
    local group = Q.group(args[2])
    local count = Q.count(args[3], 0, 500, 25)
    if count == 0 then return 0 end
    local key = KP .. 'f:' .. group
    local jids = rcall('LRANGE', key, -count, -1)
    local moved = 0
    for i = #jids, 1, -1 do
      local jid = jids[i]
      local h = Q.read(jid, { 'state', 'queue', 'priority', 'retries', 'failure', 'history' })
      if h and h.state == 'failed' then
        Q.unfailed_stat(h.failure, h.queue)
        Q.history(jid, now, 'put', { q = queue }, h.history)
        rcall('HSET', Q.kjob(jid), 'state', 'waiting', 'worker', '', 'expires', 0, 'queue', queue,
          'remaining', tonumber(h.retries) or 5)
        rcall('ZADD', Q.kq(queue, 'work'), Q.score(tonumber(h.priority) or 0, now), jid)
        moved = moved + 1
      end
    end
    rcall('LTRIM', key, 0, -#jids - 1)
    if rcall('LLEN', key) == 0 then rcall('SREM', K.failures, group) end
    if moved > 0 then Q.wake(queue) end
    return moved
  end }

  -- Decrement the `failed` statistic of the day and queue a job failed in.
  function Q.unfailed_stat(failure_text, queue)
    local ok, f = pcall(cjson.decode, failure_text or '')
    if ok and type(f) == 'table' and tonumber(f.when) and queue and queue ~= '' then
      Q.counter(queue, tonumber(f.when), 'failed', -1)
    end
  end

  C['failed'] = { 'Failed', function(now, args)
    local group = args[1]
    if group == nil then
      local out = {}
      for _, g in ipairs(rcall('SMEMBERS', K.failures)) do out[g] = rcall('LLEN', KP .. 'f:' .. g) end
      return cjson.encode(out)
    end
    Q.group(group)
    local start = Q.offset('start', args[2], 'is not a number')
    local limit = 25
    if args[3] ~= nil then
      limit = Q.integer('limit', args[3], 0, 500, 'is not a number')
    end
    local jobs = {}
    if limit > 0 then jobs = rcall('LRANGE', KP .. 'f:' .. group, start, start + limit - 1) end
    return cjson.encode({ total = rcall('LLEN', KP .. 'f:' .. group), jobs = jobs })
  end }

  local function histogram_fields()
    local names = {}
    for i = 0, 59 do table.insert(names, 's' .. i) end
    for i = 1, 59 do table.insert(names, 'm' .. i) end
    for i = 1, 23 do table.insert(names, 'h' .. i) end
    for i = 1, 6 do table.insert(names, 'd' .. i) end
    return names
  end

  -- The statistics of one wait/run hash; `held`: its samples not yet written out
  -- (samples.lua), folded in exactly as their write-out will fold them into the hash.
  local function timing(key, held)
    local names = histogram_fields()
    local fields = { 'total', 'mean', 'vk' }
    for _, n in ipairs(names) do table.insert(fields, n) end
    local v = rcall('HMGET', key, unpack(fields))
    local count = tonumber(v[1]) or 0
    local mean = tonumber(v[2]) or 0
    local vk = tonumber(v[3]) or 0
    local hist = {}
    for i = 4, #fields do table.insert(hist, tonumber(v[i]) or 0) end
    if held then
      count, mean, vk = Q.welford(count, mean, vk, held)
      local index = {}
      for i, n in ipairs(names) do index[n] = i end
      local counts = Q.histogram(held)
      for b, n in pairs(counts) do
        local i = index[b]  -- (a span of 7 days or more has a bucket `stats` does not list)
        if i then hist[i] = hist[i] + n end
      end
    end
    local std = 0
    if count > 1 then std = math.sqrt(vk / (count - 1)) end
    return { count = count, mean = mean, std = std, histogram = hist }
  end

  C['stats'] = { 'Stats', function(now, args)
    local queue = Q.queue(args[1])
    local date = Q.number('date', args[2], 'missing or not a number')
    local bin = Q.bin(date)
    local c = rcall('HMGET', KP .. 's:stats:' .. bin .. ':' .. queue, 'retries', 'failed', 'failures')
    -- Samples held in the engine's memory are merged, not written out first: `stats` runs
    -- read-only (FCALL_RO), and a read that wrote could not be served at maxmemory.
    local held = Q.held_stats and Q.held_stats() or {}
    local wait, run = KP .. 's:wait:' .. bin .. ':' .. queue, KP .. 's:run:' .. bin .. ':' .. queue
    return cjson.encode({
      retries = tonumber(c[1]) or 0,
      failed = tonumber(c[2]) or 0,
      failures = tonumber(c[3]) or 0,
      wait = timing(wait, held[wait]),
      run = timing(run, held[run]),
    })
  end }
end
