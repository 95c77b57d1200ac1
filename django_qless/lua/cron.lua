-- cron.lua: cron schedules: recurring jobs whose spawn times are wall-clock ticks.
--
-- The client computes the ticks from the cron text and time zone (the engine has no
-- calendar) and hands the next few to the engine, which spawns each due tick's child at pop
-- time exactly as it spawns recurring jobs (spawn.lua), so every worker and shard agrees:
-- a tick is consumed in one atomic call and `last` keeps a consumed tick from coming back.
--
--@ needs spawn lists
--@ command cron.set
--@ command cron.ticks
--@ command cron.get
--@ command cron.run
--@ command cron.names
--
-- Commands (after `now`):
--   cron.set   queue jid klass data cron timezone missed bound grace refill ticks
--              [priority p] [tags JSON] [retries n] [throttles JSON] [count n] [last t]
--              -> 0 unchanged, 1 created, 2 changed (an existing interval job's jid: error)
--              (`count` and `last` apply on creation only: a schedule moved in from another
--              keyspace goes on with its numbering and its consumed ticks)
--   cron.ticks jid cron timezone refill ticks     -> ticks now stored, or -1 when the
--                                                   schedule is gone or its timing changed
--   cron.get   jid                                 -> JSON or nil
--   cron.run   jid                                 -> the jid of a child put now
--   cron.names [due]                               -> the schedules' jids (with `due`: at
--                                                   most 100 whose ticks to top up by then)
-- `ticks` is a JSON array of at most 1000 integer epoch seconds; only those after the
-- schedule's `last` are stored (on creation `last` is `now`; a change of cron text or time
-- zone moves it to `now` and drops the stored ticks). `refill`: when the client should hand
-- over more ticks. `missed` (what a pop does with ticks that came due while nobody popped):
-- 'skip' spawns the latest due tick only if it is at most `grace` seconds old, 'once' spawns
-- the latest due tick, 'catchup' the latest `bound` ones; the other due ticks are dropped.
--
-- Keys:
--   ql:r:<jid>             hash  template (recur.lua's fields with type 'cron', interval 0)
--                                and cron timezone missed bound grace last
--   ql:rt:<jid>            zset  the ticks not consumed yet (member and score: the tick)
--   ql:crons               zset  cron jids -> when the client should add ticks
--   ql:q:<queue>-recur     zset  the template -> its next tick (far ahead when none is stored)
--   ql:queues              zset  (ZADD NX)
--   ql:j:<jid>-<n>, ql:q:<queue>-work, ql:t:<tag>, ql:tags   children (spawn.lua)
--   ql:config              hash  hidden field #due:<queue> (HGET/HSET)

Q.mod.cron = function()
  local rcall = Q.rcall
  local floor = math.floor
  local C = Q.commands

  -- Score of a template with no tick stored: a year ahead (refilled long before).
  local IDLE = 366 * 86400
  local POLICIES = { skip = true, once = true, catchup = true }
  local FIELDS = { 'type', 'queue', 'klass', 'data', 'priority', 'tags', 'retries', 'throttles',
    'cron', 'timezone', 'missed', 'bound', 'grace', 'last', 'count' }

  local function cron_jid(v) return Q.jid(v, 'jid', 48) end
  local function tkey(jid) return KP .. 'rt:' .. jid end

  local function text_arg(name, v, max)
    if v == nil or v == '' then Q.fail('Arg "' .. name .. '" missing') end
    if #v > max or not v:match('^[\32-\126]+$') then
      Q.fail('Arg "' .. name .. '" invalid: ' .. tostring(v))
    end
    return v
  end

  local function ticks_arg(v)
    local list = Q.json('ticks', v)
    if type(list) ~= 'table' then Q.fail('Arg "ticks" not a JSON array') end
    if #list > Q.MAX_LIST then Q.fail('at most ' .. Q.MAX_LIST .. ' ticks') end
    for i, t in ipairs(list) do
      if type(t) ~= 'number' or t ~= floor(t) or t < 0 or t > 1e11 then
        Q.fail('Arg "ticks" invalid tick: ' .. tostring(t))
      end
      list[i] = t
    end
    return list
  end

  local function read(jid)
    local v = rcall('HMGET', KP .. 'r:' .. jid, unpack(FIELDS))
    if not v[1] then return nil end
    local t = {}
    for i, name in ipairs(FIELDS) do t[name] = v[i] end
    return t
  end

  -- Store the ticks after `last`, re-score the template at its next tick, note the refill.
  local function store(now, jid, queue, last, ticks, refill)
    local key = tkey(jid)
    for i = 1, #ticks, Q.CHUNK do
      local args = {}
      for k = i, math.min(i + Q.CHUNK - 1, #ticks) do
        if ticks[k] > last then
          table.insert(args, ticks[k]); table.insert(args, string.format('%d', ticks[k]))
        end
      end
      if #args > 0 then rcall('ZADD', key, unpack(args)) end
    end
    local head = rcall('ZRANGE', key, 0, 0, 'WITHSCORES')
    local at = tonumber(head[2]) or (now + IDLE)
    rcall('ZADD', Q.kq(queue, 'recur'), at, jid)
    Q.lower_due(queue, at)
    rcall('ZADD', KP .. 'crons', refill, jid)
    return rcall('ZCARD', key)
  end

  C['cron.set'] = { 'Cron', function(now, args)
    local queue = Q.queue(args[1])
    local jid = cron_jid(args[2])
    local klass = Q.klass(args[3])
    local data = Q.data(args[4])
    local cron = text_arg('cron', args[5], 256)
    local tz = text_arg('timezone', args[6], 64)
    local missed = args[7]
    if not POLICIES[missed] then
      Q.fail('Arg "missed" must be skip, once or catchup: ' .. tostring(missed))
    end
    local bound = Q.integer('bound', args[8], 1, Q.MAX_LIST)
    local grace = Q.integer('grace', args[9], 0, 31536000)
    local refill = Q.number('refill', args[10])
    local ticks = ticks_arg(args[11])
    local opts = Q.pairs_args(args, 12)
    for name in pairs(opts) do
      if name ~= 'priority' and name ~= 'tags' and name ~= 'retries' and name ~= 'throttles'
          and name ~= 'count' and name ~= 'last' then
        Q.fail('Unrecognized option "' .. tostring(name) .. '"')
      end
    end
    local priority = opts.priority and Q.priority(opts.priority) or 0
    local tags = cjson.encode(opts.tags and Q.tags(opts.tags) or {})
    local retries = opts.retries and Q.integer('retries', opts.retries, 0, 1000) or 0
    local throttles = opts.throttles and Q.throttles(opts.throttles) or {}
    throttles = #throttles > 0 and cjson.encode(throttles) or false
    local moved_count = opts.count and Q.integer('count', opts.count, 0) or 0
    local moved_last = opts.last and Q.number('last', opts.last) or now
    local old = read(jid)
    if old and old.type ~= 'cron' then
      Q.fail('Recurring job ' .. jid .. ' is an interval schedule')
    end
    -- Checked: now write.
    local key = KP .. 'r:' .. jid
    local last, status = moved_last, 1
    if old then
      last = tonumber(old.last) or now
      local timing = old.cron == cron and old.timezone == tz
      if timing and old.queue == queue and old.klass == klass and old.data == data
          and tonumber(old.priority) == priority and old.tags == tags
          and tonumber(old.retries) == retries and (old.throttles or false) == throttles
          and old.missed == missed and tonumber(old.bound) == bound
          and tonumber(old.grace) == grace then
        store(now, jid, queue, last, ticks, refill)
        return 0
      end
      status = 2
      if not timing then
        -- New times start from now: ticks of the old cron text are not run.
        last = math.max(last, floor(now))
        rcall('DEL', tkey(jid))
      end
      if old.queue ~= queue then rcall('ZREM', Q.kq(old.queue, 'recur'), jid) end
    end
    local fields = { 'jid', jid, 'klass', klass, 'data', data, 'priority', priority,
      'tags', tags, 'state', 'recur', 'queue', queue, 'type', 'cron',
      'count', old and tonumber(old.count) or moved_count, 'interval', 0, 'retries', retries,
      'backlog', 0, 'cron', cron, 'timezone', tz, 'missed', missed, 'bound', bound,
      'grace', grace, 'last', last }
    if throttles then
      table.insert(fields, 'throttles'); table.insert(fields, throttles)
    else
      rcall('HDEL', key, 'throttles')
    end
    rcall('HSET', key, unpack(fields))
    rcall('ZADD', K.queues, 'NX', now, queue)
    store(now, jid, queue, last, ticks, refill)
    return status
  end }

  C['cron.ticks'] = { 'Cron', function(now, args)
    local jid = cron_jid(args[1])
    local cron = text_arg('cron', args[2], 256)
    local tz = text_arg('timezone', args[3], 64)
    local refill = Q.number('refill', args[4])
    local ticks = ticks_arg(args[5])
    local old = read(jid)
    if not old or old.type ~= 'cron' or old.cron ~= cron or old.timezone ~= tz then
      return -1
    end
    return store(now, jid, old.queue, tonumber(old.last) or now, ticks, refill)
  end }

  C['cron.get'] = { 'Cron', function(now, args)
    local jid = cron_jid(args[1])
    local t = read(jid)
    if not t or t.type ~= 'cron' then return nil end
    local head = rcall('ZRANGE', tkey(jid), 0, 0, 'WITHSCORES')
    return cjson.encode({
      jid = jid, klass = t.klass, queue = t.queue, data = t.data,
      priority = tonumber(t.priority) or 0, tags = Q.list(t.tags),
      retries = tonumber(t.retries) or 0, throttles = Q.list(t.throttles),
      cron = t.cron, timezone = t.timezone, missed = t.missed,
      bound = tonumber(t.bound) or 1, grace = tonumber(t.grace) or 0,
      last = tonumber(t.last) or 0, count = tonumber(t.count) or 0,
      next = tonumber(head[2]), stored = rcall('ZCARD', tkey(jid)),
      refill = tonumber(rcall('ZSCORE', KP .. 'crons', jid)),
    })
  end }

  C['cron.run'] = { 'Cron', function(now, args)
    local jid = cron_jid(args[1])
    local queue = rcall('HGET', KP .. 'r:' .. jid, 'queue')
    local t = Q.template(jid)
    if not t or t.type ~= 'cron' or not queue then Q.fail('No cron schedule ' .. jid) end
    local child, guard = false, 0
    while not child and guard < Q.MAX_LIST do
      guard = guard + 1
      child = Q.spawn_child(now, queue, jid, t, now)
    end
    if not child then Q.fail('No free child jid for ' .. jid) end
    rcall('ZADD', K.queues, 'NX', now, queue)
    Q.wake(queue)
    return child
  end }

  C['cron.names'] = { 'Cron', function(now, args)
    if args[1] == nil then return rcall('ZRANGE', KP .. 'crons', 0, -1) end
    local due = Q.number('due', args[1])
    return rcall('ZRANGEBYSCORE', KP .. 'crons', '-inf', due, 'LIMIT', 0, 100)
  end }

  -- Spawn template `rjid`'s due ticks in `queue` by its missed-tick policy, at most `limit`
  -- children; return how many were spawned (spawn.lua calls it for a 'cron' template).
  function Q.cron_spawn(now, queue, rjid, t, limit)
    local key = tkey(rjid)
    local due = rcall('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, Q.MAX_LIST)
    local n = #due
    local picks = {}
    if n > 0 then
      if t.missed == 'catchup' then
        for i = math.max(1, n - t.bound + 1), n do table.insert(picks, i) end
      elseif t.missed ~= 'skip' or now - tonumber(due[n]) <= t.grace then
        picks = { n }
      end
    end
    local spawned, upto = 0, n  -- due[1..upto] are consumed
    for k, i in ipairs(picks) do
      if spawned >= limit then
        upto = i - 1  -- the rest stay due for the next pop (still within the policy)
        break
      end
      local guard = 0
      repeat
        guard = guard + 1
      until Q.spawn_child(now, queue, rjid, t, tonumber(due[i])) or guard >= Q.MAX_LIST
      spawned = spawned + 1
    end
    if upto > 0 then
      rcall('ZREMRANGEBYSCORE', key, '-inf', due[upto])
      rcall('HSET', KP .. 'r:' .. rjid, 'last', due[upto])
    end
    local head = rcall('ZRANGE', key, 0, 0, 'WITHSCORES')
    rcall('ZADD', Q.kq(queue, 'recur'), tonumber(head[2]) or (now + IDLE), rjid)
    if not head[2] then rcall('ZADD', KP .. 'crons', now, rjid) end  -- out of ticks: refill now
    return spawned
  end
end
