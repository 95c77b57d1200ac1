-- ratelimit.lua: rate limits (at most N jobs started per period, per queue or per job kind,
-- optionally one budget per key taken from the job's data), checked by pop, and the commands
-- that define them. Loaded by pop only for a queue or keyspace that has limits.
--
--@ command rate.set
--@ command rate.get
--@ command rate.delete
--@ command rate.kinds
--
-- Commands (after `now`):
--   rate.set     scope name max period [key]   -> nil (a queue's idle workers are woken)
--                scope: 'queue' or 'kind'; name: the queue or the job class; max: integer in
--                [1, 100000]; period: seconds in [0.001, 2678400]; key: '' (one budget) or a
--                dotted path into the job's data JSON object ('customer', 'kwargs.user_id'):
--                one budget per value found there (jobs without one share the '' budget)
--   rate.get     scope name                    -> JSON {scope, name, max, period, key,
--                used, next, keys, limited} (used: starts in the current window, of the
--                budget of the fullest key when keyed; next: seconds until that budget opens
--                again, 0 when it has room; keys: keys with starts in the window; limited:
--                jobs of the queue waiting for their window, 'queue' scope only), or nil
--   rate.delete  scope name                    -> nil (a queue's jobs waiting for a window go
--                back to work at once, its idle workers are woken; a kind's go back when their
--                window opens)
--   rate.kinds                                 -> JSON array of the job classes with a limit
--
-- Algorithm: a sliding-window log per budget. Each start is a member of a sorted set scored
-- by its time in whole milliseconds; a budget has room when fewer than `max` starts lie in
-- the last `period`. The exact guarantee (never more than `max` starts in any window of
-- `period`) and the exact time the window opens (the start `max` places back, plus `period`)
-- are why: the worker sleeps until that very moment. Memory is `max` entries per active
-- budget. (Integer scores: a small sorted set stores them as integers, so an insert compares
-- them without parsing decimal text.)
--
-- Keys:
--   ql:rl:<scope>:<name>            hash  {max, period, key} (HSET, HMGET, DEL)
--   ql:rl:<scope>:<name>-log[:<v>]  zset  start member -> time in ms (ZREMRANGEBYSCORE, ZCARD,
--                                         ZRANGE, ZADD, PEXPIRE); <v>: the key's value
--   ql:rl:<scope>:<name>-keys       zset  key value -> last start in ms (keyed budgets only)
--   ql:rl-kinds                     set   job classes with a limit (SADD, SREM, SMEMBERS)
--   ql:rl-queues                    set   queues with a limit (SADD, SREM, SCARD)
--   ql:q:<queue>-ratelimited        zset  jids over a limit -> time their window opens
--                                         (their job hashes stay `waiting`)
--   ql:q:<queue>-work               zset  (ZADD of jobs whose window opened)
--   ql:j:<jid>                      hash  (HMGET state queue priority time)
--   ql:config                       hash  hidden fields #rate ('1': the keyspace has a limit;
--                                         the only one an unlimited pop reads), #rate:<queue>
--                                         ('1': the queue has one), #rate-kinds (how many
--                                         classes have one)

Q.mod.ratelimit = function()
  local rcall = Q.rcall
  local C = Q.commands
  local floor = math.floor
  local MAX_MAX, MAX_PERIOD = 100000, 2678400

  local function krl(scope, name) return KP .. 'rl:' .. scope .. ':' .. name end

  -- Per-call state: definitions read (id -> def or false), queues whose unkeyed queue limit
  -- is full (queue -> opening time), queues left with work after parking (queue -> true),
  -- the newest start of each log written (log -> ms).
  local function state()
    local s = ctx.rl
    if not s then s = { defs = {}, open = {}, busy = {}, top = {} }; ctx.rl = s end
    return s
  end

  -- The definition of a limit ({max, period, key, base}) or false, read once per call.
  local function def(scope, name)
    local defs = state().defs
    local id = scope .. ':' .. name
    local d = defs[id]
    if d == nil then
      local base = krl(scope, name)
      local v = rcall('HMGET', base, 'max', 'period', 'key')
      local max, period = tonumber(v[1]), tonumber(v[2])
      if max and period and max >= 1 and period > 0 then
        d = { max = max, period = period, pms = floor(period * 1000 + 0.5), key = v[3] or '',
          base = base }
      else
        d = false
      end
      defs[id] = d
    end
    return d
  end

  -- Forget starts older than the window; return (starts in it, time the budget opens: nil
  -- when it has room).
  -- (times in the logs are whole milliseconds; a window opens half a millisecond after its
  -- last start leaves it, so `now` then rounds down past it)
  local function ms(now) return floor(now * 1000) end
  local function opens(score, d) return (score + d.pms + 0.5) / 1000 end

  local function look(log, d, now)
    local t = ms(now)
    rcall('ZREMRANGEBYSCORE', log, '-inf', Q.int_arg(t - d.pms))
    local n = rcall('ZCARD', log)
    if n < d.max then return n, nil end
    local e = rcall('ZRANGE', log, n - d.max, n - d.max, 'WITHSCORES')
    return n, opens(tonumber(e[2]) or t, d)
  end

  -- The value at dotted `path` in a job's data JSON ('' when absent or not a scalar).
  local function key_value(data, path)
    local ok, v = pcall(cjson.decode, data or '')
    if not ok then return '' end
    for part in path:gmatch('[^%.]+') do
      if type(v) ~= 'table' then return '' end
      v = v[part]
    end
    local t = type(v)
    if t == 'string' then return v:sub(1, 512) end
    if t == 'number' then
      if v == floor(v) and v > -1e15 and v < 1e15 then return string.format('%d', v) end
      return string.format('%.17g', v)
    end
    if t == 'boolean' then return tostring(v) end
    return ''
  end

  -- Whether the queue (its config field `field`, '#rate:<queue>') and the keyspace's job
  -- classes have limits.
  function Q.rate_flags(field)
    local kinds = Q.cfgraw('#rate-kinds')
    return Q.cfgraw(field) and true or false, (kinds and kinds ~= '0') and true or false
  end

  -- The unkeyed queue limit of `queue` caps how many jobs a pop may take: returns the count
  -- allowed (0: full, its opening noted for the wake hint and the hand-off). `handing`: the
  -- pop of a hand-off to an idle worker (handoff.lua).
  function Q.rate_room(now, queue, count, handing)
    local d = def('queue', queue)
    if not d or d.key ~= '' then return count end
    local n, opening = look(d.base .. '-log', d, now)
    if opening then
      state().open[queue] = opening
      -- Idle workers that registered while the queue was empty never heard of this window:
      -- when a job arrives for them it is a timer, so they are woken to learn it if they
      -- would otherwise sleep past it. (Not on a worker's own reserve: it learns the window
      -- from the reply, and a wake-up would send it straight back.)
      if handing then Q.note_timer(queue, opening, nil) end
      return 0
    end
    return math.min(count, d.max - n)
  end

  -- The budgets a job popped from `queue` needs. Returns (nil, budgets) when each has room,
  -- else the time the last of the full ones opens. `kinds`: the keyspace has kind limits.
  function Q.rate_check(h, queue, kinds, now)
    local need = {}
    local q = def('queue', queue)
    if q then need[#need + 1] = q end
    if kinds and h.klass then
      local k = def('kind', h.klass)
      if k then need[#need + 1] = k end
    end
    local budgets, opening = {}, nil
    for i, d in ipairs(need) do
      local log, value = d.base .. '-log', nil
      if d.key ~= '' then
        value = key_value(h.data, d.key)
        log = log .. ':' .. value
      end
      -- (the queue's own unkeyed budget was looked at by Q.rate_room, which capped the count)
      local at = nil
      if i > 1 or not q or d.key ~= '' then at = select(2, look(log, d, now)) end
      if at then
        if not opening or at > opening then opening = at end
      else
        budgets[#budgets + 1] = { d, log, value }
      end
    end
    if opening then return opening, nil end
    return nil, budgets
  end

  -- Record a start in each budget (Q.rate_check's list).
  -- An unkeyed budget's log is one key, pruned by every look and deleted with its limit; a
  -- keyed one's logs expire a second after their last start (a key may never come back).
  -- The index of keys is pruned when a new key joins it (repeat keys cost one ZADD).
  -- A caller's clock may lag the clock of a call that ran before it by a few milliseconds
  -- (each worker reads its own time before its call reaches Redis): a start is recorded no
  -- earlier than the newest in its log, so the log keeps the order the starts happened in
  -- and a later look cannot drop one from the window early.
  function Q.rate_take(jid, budgets, now)
    local member = jid .. ' ' .. (ctx.now_text or string.format('%.17g', now))
    local t = ms(now)
    local tops = state().top
    for _, b in ipairs(budgets) do
      local d, log, value = b[1], b[2], b[3]
      local top = tops[log]
      if not top then top = tonumber(rcall('ZRANGE', log, -1, -1, 'WITHSCORES')[2]) or t end
      if t > top then top = t end
      tops[log] = top
      local score = Q.int_arg(top)
      rcall('ZADD', log, score, member)
      if value then
        local ttl = floor(d.period * 1000) + 1000
        rcall('PEXPIRE', log, ttl)
        local keys = d.base .. '-keys'
        if rcall('ZADD', keys, score, value) == 1 then
          rcall('ZREMRANGEBYSCORE', keys, '-inf', Q.int_arg(t - d.pms))
          rcall('PEXPIRE', keys, ttl)
        end
      end
    end
  end

  -- A job over a limit waits (state `waiting`) out of the work set until `at`.
  function Q.rate_park(jid, queue, at)
    rcall('ZADD', Q.kq(queue, 'ratelimited'), at, jid)
  end

  -- Note that a pop stopped with work left after parking jobs: the queue is due now.
  function Q.rate_busy(queue) state().busy[queue] = true end

  -- The time a queue's next job may start by its limits (nil: not limited by them now).
  function Q.rate_due(queue)
    local s = ctx.rl
    if not s then return nil end
    if s.busy[queue] then return ctx.now end
    return s.open[queue]
  end

  -- Move the jobs of `queue` whose window opened back to work, in their old order (their
  -- priority and the time they were queued); returns how many.
  function Q.rate_release(now, queue, wake)
    local key = Q.kq(queue, 'ratelimited')
    local jids = rcall('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, Q.CHUNK)
    if #jids == 0 then return 0 end
    local moved = 0
    for _, jid in ipairs(jids) do
      local v = rcall('HMGET', Q.kjob(jid), 'state', 'queue', 'priority', 'time')
      -- (a job canceled, moved or popped meanwhile has left: only its entry here goes)
      if v[1] == 'waiting' and v[2] == queue then
        local t = tonumber(v[4]) or now
        rcall('ZADD', Q.kq(queue, 'work'), Q.score(tonumber(v[3]) or 0, t), jid)
        moved = moved + 1
      end
    end
    Q.chunked('ZREM', key, jids)
    if wake and moved > 0 then Q.wake(queue) end
    return moved
  end

  -- ---------------------------------------------------------------- commands

  local function scope_arg(v)
    if v ~= 'queue' and v ~= 'kind' then
      Q.fail('Arg "scope" must be "queue" or "kind": ' .. tostring(v))
    end
    return v
  end

  local function name_arg(scope, v)
    if scope == 'queue' then return Q.queue(v, 'name') end
    if v == nil or v == '' then Q.fail('Arg "name" missing') end
    return Q.klass(v)
  end

  local function key_arg(v)
    if v == nil or v == '' then return '' end
    if #v > 128 or not v:match('^[%w_%-]+$') and not v:match('^[%w_%-]+[%w_%.%-]*[%w_%-]$')
      or v:find('%.%.') then
      Q.fail('Arg "key" must be a dotted path of names ([A-Za-z0-9_-], at most 128): ' .. v)
    end
    local depth = select(2, v:gsub('%.', '')) + 1
    if depth > 8 then Q.fail('Arg "key" must have at most 8 parts: ' .. v) end
    return v
  end

  -- Keep the hidden fields that tell pop whether to load this module in step with the sets.
  local function count_limits()
    local kinds = rcall('SCARD', KP .. 'rl-kinds')
    rcall('HSET', K.config, '#rate-kinds', kinds)
    if kinds + rcall('SCARD', KP .. 'rl-queues') > 0 then
      rcall('HSET', K.config, '#rate', '1')
    else
      rcall('HDEL', K.config, '#rate')
    end
  end

  C['rate.set'] = { 'RateSet', function(now, args)
    local scope = scope_arg(args[1])
    local name = name_arg(scope, args[2])
    local max = Q.integer('max', args[3], 1, MAX_MAX)
    local period = Q.number('period', args[4])
    if period < 0.001 or period > MAX_PERIOD then
      Q.fail('Arg "period" must be in [0.001, ' .. MAX_PERIOD .. '] seconds: ' .. args[4])
    end
    local key = key_arg(args[5])
    -- (every argument checked: the writes start here)
    rcall('HSET', krl(scope, name), 'max', max, 'period', args[4], 'key', key)
    if scope == 'queue' then
      rcall('HSET', K.config, Q.mfield('rate', name), '1')
      rcall('SADD', KP .. 'rl-queues', name)
      -- (idle workers sleeping until the old limit's window learn the new one)
      Q.wake(name)
    else
      rcall('SADD', KP .. 'rl-kinds', name)
    end
    count_limits()
  end }

  C['rate.delete'] = { 'RateDelete', function(now, args)
    local scope = scope_arg(args[1])
    local name = name_arg(scope, args[2])
    rcall('DEL', krl(scope, name), krl(scope, name) .. '-log')
    if scope == 'queue' then
      rcall('HDEL', K.config, Q.mfield('rate', name))
      rcall('SREM', KP .. 'rl-queues', name)
      Q.rate_release(math.huge, name, false)
      Q.wake(name)
    else
      rcall('SREM', KP .. 'rl-kinds', name)
    end
    count_limits()
  end }

  C['rate.get'] = { 'RateGet', function(now, args)
    local scope = scope_arg(args[1])
    local name = name_arg(scope, args[2])
    local d = def(scope, name)
    if not d then return nil end
    local out = { scope = scope, name = name, max = d.max, period = d.period, key = d.key,
      used = 0, next = 0, keys = 0 }
    local logs = {}
    if d.key == '' then
      logs[1] = d.base .. '-log'
    else
      local keys = d.base .. '-keys'
      -- (read only: the keys seen in the window, at most 1000 of them looked at)
      local values = rcall('ZRANGEBYSCORE', keys, '(' .. Q.int_arg(ms(now) - d.pms),
        '+inf', 'LIMIT', 0, 1000)
      out.keys = #values
      for i, value in ipairs(values) do logs[i] = d.base .. '-log:' .. value end
    end
    for _, log in ipairs(logs) do
      local n = rcall('ZCOUNT', log, '(' .. Q.int_arg(ms(now) - d.pms), '+inf')
      if n > out.used then out.used = n end
      if n >= d.max then
        local e = rcall('ZREVRANGEBYSCORE', log, '+inf', '-inf', 'WITHSCORES', 'LIMIT',
          d.max - 1, 1)
        local at = opens(tonumber(e[2]) or ms(now), d) - now
        if at > out.next then out.next = at end
      end
    end
    if scope == 'queue' then out.limited = rcall('ZCARD', Q.kq(name, 'ratelimited')) end
    return cjson.encode(out)
  end }

  C['rate.kinds'] = { 'RateKinds', function(now, args)
    local kinds = rcall('SMEMBERS', KP .. 'rl-kinds')
    table.sort(kinds)
    if #kinds == 0 then return '[]' end
    return cjson.encode(kinds)
  end }
end
