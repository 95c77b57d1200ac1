-- complete.lua: completing a job (also the first half of the worker's complete.reserve),
-- releasing its dependents, and the retention of completed jobs.
--
--@ needs samples
--@ command complete
--
-- Commands (after `now`):
--   complete  jid worker queue data [next q] [delay d] [depends JSON] [token t] -> state text
--
-- The earlier completions of complete.reserve's paired form (worker.lua):
--   complete.reserve +N (jid queue data token){N} jid worker queue data token count queue...
-- completes N jobs of the same worker before the last one (Q.earlier_args, Q.complete_earlier).
--
-- Keys:
--   ql:j:<jid>                 hash  (HMGET, HSET, HDEL; `done` = "<token> <result>")
--   ql:j:<jid>-history         list  (RPUSH via Q.history)
--   ql:j:<jid>-dependents      set   (SMEMBERS, DEL)
--   ql:j:<jid>-dependencies    set   of each dependent (SREM, SCARD)
--   ql:q:<queue>-work|locks|scheduled|depends  zset (ZADD, ZREM)
--   ql:queues                  zset  (ZADD NX)
--   ql:w:<worker>:jobs         zset  (ZREM)
--   ql:completed               zset  (ZADD, ZREM, ZRANGEBYSCORE, ZCARD, ZRANGE)
--   ql:tracked                 zset  (ZREM, via Q.delete_job)
--   ql:s:run:<day>:<queue>     hash  (via Q.sample)
--   ql:config                  hash  (HSET of #completed-due, #completed-count)
--   channels: ql:log, ql:completed, ql:wake:<queue>

Q.mod.complete = function()
  local rcall = Q.rcall
  local C = Q.commands

  -- Completed-job retention: at most 500 deletions per call.
  -- The count cap: trims ql:completed down to `keep` within `budget` deletions; returns its
  -- size afterwards.
  local function trim_completed(budget, keep)
    local card = rcall('ZCARD', K.completed)
    local excess = card - keep
    if excess > 0 and budget > 0 then
      local jids = rcall('ZRANGE', K.completed, 0, math.min(excess, budget) - 1)
      if jids[1] then Q.need('job') end  -- (Q.delete_job: job.lua, loaded when it runs)
      for _, jid in ipairs(jids) do Q.delete_job(jid) end
      Q.chunked('ZREM', K.completed, jids)
      card = card - #jids
    end
    return card
  end

  -- Completions this engine can record in one HORIZON, with room to spare (a completion
  -- costs tens of microseconds of Redis CPU): '#completed-count' plus this stays a bound of
  -- the set's size until the next scan.
  Q.COMPLETED_MARGIN = 20000

  function Q.expire_completed(now)
    local budget = Q.CHUNK
    local keep = Q.cfgnum('jobs-history-count', 50000)
    -- '#completed-due': no completed job can be older than jobs-history before this time; it is
    -- at most HORIZON ahead, so completions recorded by another writer are seen within it.
    -- '#completed-count': the size of ql:completed when that bound was written.
    local due = Q.tonum(Q.cfgraw('#completed-due'))
    if due and now < due and due <= now + Q.HORIZON then
      -- Far enough under the cap at the last scan (at most HORIZON ago): no ZCARD.
      local count = Q.tonum(Q.cfgraw('#completed-count'))
      if not (count and count + Q.COMPLETED_MARGIN <= keep) then trim_completed(budget, keep) end
      return
    end
    local age = Q.cfgnum('jobs-history', 604800)
    local jids = rcall('ZRANGEBYSCORE', K.completed, '-inf', now - age, 'LIMIT', 0, budget)
    if jids[1] then Q.need('job') end  -- (as in trim_completed)
    for _, jid in ipairs(jids) do Q.delete_job(jid) end
    if #jids > 0 then Q.chunked('ZREM', K.completed, jids) end
    local next_due = now
    if #jids < budget then
      next_due = now + Q.HORIZON
      local first = rcall('ZRANGE', K.completed, 0, 0, 'WITHSCORES')
      local oldest = tonumber(first[2])
      if oldest and oldest + age < next_due then next_due = math.max(oldest + age, now) end
    end
    local count = trim_completed(budget - #jids, keep)
    rcall('HSET', K.config, '#completed-due', next_due, '#completed-count', Q.int_arg(count))
  end

  -- ---------------------------------------------------------------- complete

  -- The job hash fields complete needs, in one constructor (sized once, where setting them
  -- one by one into `{}` grows the table again and again). `priority` only for `next`.
  -- `data` too: a completion that sends the data back unchanged (the common case) needs no
  -- JSON check of it (Q.data_arg).
  local function read_own(jid, nextq)
    local v = rcall('HMGET', KP .. 'j:' .. jid, 'state', 'queue', 'worker', 'retries', 'time',
      'held', 'history', 'tracked', 'done', 'data', 'visit', nextq and 'priority' or 'state')
    local any = false
    for i = 1, 11 do
      if v[i] then any = true; break end
    end
    if not any then return nil end
    return { state = v[1] or nil, queue = v[2] or nil, worker = v[3] or nil,
      retries = v[4] or nil, time = v[5] or nil, held = v[6] or nil, history = v[7] or nil,
      tracked = v[8] or nil, done = v[9] or nil, data = v[10] or nil, visit = v[11] or nil,
      priority = nextq and v[12] or nil }
  end
  Q.read_own = read_own

  -- The `data` argument of a completion: the text the job already stores is taken as is (it
  -- passed this check when it was written, and writing it again changes nothing); any other
  -- text is checked (Q.data) -- a cjson decode, ~20k instructions for a small object.
  function Q.data_arg(v, h)
    if v ~= nil and h and v == h.data then return v end
    return Q.data(v)
  end

  -- Ownership checks shared by complete and complete.reserve. With an attempt token that
  -- already completed this job, returns (h, recorded result) and the caller acts no further.
  -- `h`: the job as read_own read it (nil: read here).
  function Q.check_running(jid, worker, queue, token, nextq, h)
    h = h or read_own(jid, nextq)
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    local recorded = Q.recorded(h, token)
    if recorded then return h, recorded end
    if h.state ~= 'running' then
      Q.fail('Job ' .. jid .. ' is not currently running: ' .. tostring(h.state))
    end
    if h.worker ~= worker then
      Q.fail('Job ' .. jid .. ' has been handed out to another worker: ' .. tostring(h.worker))
    end
    if h.queue ~= queue then
      Q.fail('Job ' .. jid .. ' running in another queue: ' .. tostring(h.queue))
    end
    return h
  end

  -- Release every dependent of a completed job whose last dependency this was.
  local function release_dependents(jid, now)
    local dents = rcall('SMEMBERS', Q.kdents(jid))
    if dents[1] then Q.need('job') end  -- (Q.undepend: most jobs have no dependents)
    for _, d in ipairs(dents) do
      rcall('SREM', Q.kdeps(d), jid)
      if rcall('SCARD', Q.kdeps(d)) == 0 then
        local h = Q.read(d, { 'state', 'queue', 'priority', 'scheduled' })
        if h and h.state == 'depends' and h.queue and h.queue ~= '' then Q.undepend(d, h, now) end
      end
    end
    if #dents > 0 then rcall('DEL', Q.kdents(jid)) end
  end

  -- Completions of one call that share their set writes (complete.reserve's paired form):
  -- the jids to take out of each queue's lock set and the worker's set and to add to
  -- ql:completed, written by Q.finish_batch with one command per set for them all, then the
  -- release of their dependents and one retention check, instead of four commands and a
  -- check per job.
  function Q.complete_batch()
    return { jids = {}, locks = {}, queues = {} }
  end

  -- Write a batch's set changes (every job of it completed, for `worker`), before the call
  -- reserves: the sets are smaller for the pop's ZADDs.
  function Q.finish_batch(now, worker, b)
    local jids = b.jids
    if not jids[1] then return end
    for _, queue in ipairs(b.queues) do rcall('ZREM', Q.qn(queue).locks, unpack(b.locks[queue])) end
    rcall('ZREM', Q.kwjobs(worker), unpack(jids))
    local at, scored = Q.time_arg(now), {}
    for i, jid in ipairs(jids) do scored[2 * i - 1] = at; scored[2 * i] = jid end
    rcall('ZADD', K.completed, unpack(scored))
    -- (most jobs have no dependents: one EXISTS for them all instead of a SMEMBERS each)
    local dents = {}
    for i, jid in ipairs(jids) do dents[i] = Q.kdents(jid) end
    if rcall('EXISTS', unpack(dents)) > 0 then
      for _, jid in ipairs(jids) do release_dependents(jid, now) end
    end
    Q.expire_completed(now)
  end

  -- Complete a running job whose ownership was checked (h from Q.check_running). `o` holds
  -- the validated arguments: jid, worker, queue, data, token (or nil), and for `complete ...
  -- next`: next (the queue), delay (seconds, 0 for none), depends (list of jids or nil);
  -- or batch (Q.complete_batch, without next: its set writes are left to Q.finish_batch).
  function Q.complete(now, h, o)
    local jid, worker, queue, data, token = o.jid, o.worker, o.queue, o.data, o.token
    local nextq, delay, depends = o.next, o.delay or 0, o.depends
    local key = Q.kjob(jid)
    local b = not nextq and o.batch
    local t = tonumber(h.time)  -- (parsed once for the visit and the run sample)
    -- The first visit's completion extends `visit` (history.lua); else the list gets it.
    local visit = not nextq and h.visit and Q.visit_done(h.visit, t, now, worker)
    if not visit then
      Q.need('advance')  -- (the history list: advance.lua)
      Q.done_entry(jid, key, h, now)
    end
    if b then
      b.jids[#b.jids + 1] = jid
      local locks = b.locks[queue]
      if locks then
        locks[#locks + 1] = jid
      else
        b.locks[queue] = { jid }
        b.queues[#b.queues + 1] = queue
      end
    else
      rcall('ZREM', Q.qn(queue).locks, jid)
      rcall('ZREM', Q.kwjobs(worker), jid)
    end
    Q.sample('run', queue, now, now - (t or now))
    if h.tracked == '1' then Q.publish(K.completed, jid) end
    local retries = Q.int_arg(tonumber(h.retries) or 5)
    local fields = { 'data', data, 'worker', '', 'failure', '{}', 'expires', '0',
      'remaining', retries, 'time', Q.ftime(now) }
    if visit then table.insert(fields, 'visit'); table.insert(fields, visit) end
    if h.history and h.history ~= '[]' then
      -- `[]` for a legacy field just migrated (this HSET replaces an HDEL)
      table.insert(fields, 'history'); table.insert(fields, '[]')
    end
    if h.held then table.insert(fields, 'held'); table.insert(fields, '') end
    if nextq then
      Q.need('advance')
      return Q.advance(now, h, jid, key, queue, nextq, delay, depends, token, fields)
    end
    -- (jid and queue quoted as cjson would, in one concatenation: names that passed Q.jid
    -- and Q.queue hold nothing to escape; no Q.publish call)
    rcall(K.pub, K.log, '{"jid":"' .. jid .. '","event":"completed","queue":"' .. queue .. '"}')
    table.insert(fields, 'state'); table.insert(fields, 'complete')
    table.insert(fields, 'queue'); table.insert(fields, '')
    if token then table.insert(fields, 'done'); table.insert(fields, token .. ' complete') end
    rcall('HSET', key, unpack(fields))
    if not b then rcall('ZADD', K.completed, Q.time_arg(now), jid) end
    -- (the throttle module loads only for a job holding throttles: most hold none)
    if h.held and h.held ~= '' then Q.need('throttle'); Q.release(jid, h.held, now) end
    Q.slot_freed(queue)
    if not b then
      release_dependents(jid, now)
      Q.expire_completed(now)
    end
    return 'complete'
  end

  -- ------------------------------------------------- earlier completions (paired form)

  -- At most this many completions ride ahead of complete.reserve's own.
  Q.EARLIER_MAX = 16
  -- Separates the per-job results in the reply's state text (no state or error text holds it).
  local RS = '\30'

  -- The leading `+N (jid queue data token){N}` of complete.reserve's paired form, checked
  -- (names, data, tokens; the jobs are read, nothing is written). Returns nil when `args`
  -- has no such prefix; else the list of completions and the arguments after the prefix.
  function Q.earlier_args(args)
    local mark = args[1]
    if not (mark and mark:byte(1) == 43) then return nil end  -- '+'
    local n = tonumber(mark:sub(2))
    if not (n and mark:find('^%+%d+$') and n >= 1 and n <= Q.EARLIER_MAX) then
      Q.fail('Arg "+N" must be + and an integer in [1, ' .. Q.EARLIER_MAX .. ']: '
        .. mark:sub(1, 80))
    end
    if #args < 1 + 4 * n then Q.fail('Arg "+N" names ' .. n .. ' completions, fewer were sent') end
    local list, seen = {}, {}
    for i = 0, n - 1 do
      local at = 2 + 4 * i
      local jid = Q.jid(args[at])
      if seen[jid] then Q.fail('Job ' .. jid .. ' is completed twice in one call') end
      seen[jid] = true
      local queue = Q.queue(args[at + 1])
      local own = read_own(jid)
      list[i + 1] = { jid = jid, queue = queue, data = Q.data_arg(args[at + 2], own),
        token = Q.token(args[at + 3]), own = own }
    end
    return list, { unpack(args, 2 + 4 * n) }
  end

  -- Check that `jid` (the call's own completion) is not among the earlier ones.
  function Q.earlier_distinct(list, jid)
    for _, o in ipairs(list) do
      if o.jid == jid then Q.fail('Job ' .. jid .. ' is completed twice in one call') end
    end
  end

  -- Q.check_running for a job of a paired call (a read): (h, recorded), or (nil, nil, '!'
  -- and the reason) when the job is no longer the worker's, so the others go on.
  function Q.check_own(jid, worker, queue, token, own)
    local ok, h, recorded = pcall(Q.check_running, jid, worker, queue, token, nil, own)
    if ok then return h, recorded end
    -- (Q.fail's text: '<position>: Complete(): <why>'; only the reason is kept)
    return nil, nil, '!' .. (tostring(h):match('%(%): (.*)$') or tostring(h))
  end

  -- Complete the earlier jobs of a paired call, in order, after every argument of the call
  -- was checked. A job whose ownership is gone (lock lost, not running, deleted) is left
  -- alone and reported by its error text after a '!'; a repeat of an attempt reports the
  -- recorded state. Returns the results joined by RS, ending with RS (the call's own state
  -- follows), and how many jobs this call completed. `b`: the call's batch (Q.complete_batch).
  function Q.complete_earlier(now, worker, list, b)
    local out, done = {}, 0
    for i, o in ipairs(list) do
      local h, recorded, lost = Q.check_own(o.jid, worker, o.queue, o.token, o.own)
      if lost then
        out[i] = lost
      elseif recorded then
        out[i] = recorded
      else
        o.worker, o.batch = worker, b
        out[i] = Q.complete(now, h, o)
        done = done + 1
      end
    end
    return table.concat(out, RS) .. RS, done
  end

  C['complete'] = { 'Complete', function(now, args)
    local jid = Q.jid(args[1])
    local worker = Q.worker(args[2])
    local queue = Q.queue(args[3])
    local own = read_own(jid, true)  -- (a read: nothing is written before the checks below)
    local data = Q.data_arg(args[4], own)
    local opts = Q.pairs_args(args, 5)
    local nextq = opts['next'] and Q.queue(opts['next'], 'next') or nil
    local delay = 0
    if opts.delay then delay = Q.delay(opts.delay) end
    if opts.depends then Q.need('lists') end  -- (a module: most completions give none)
    local depends = opts.depends and Q.depends(opts.depends, jid) or nil
    if opts.delay and not nextq then Q.fail('"delay" cannot be used without a "next".') end
    if opts.depends and not nextq then Q.fail('"depends" cannot be used without a "next".') end
    local token = Q.token(opts.token)
    local h, recorded = Q.check_running(jid, worker, queue, token, nextq, own)
    if recorded then return recorded end
    if depends then Q.check_cycle(jid, depends) end
    -- (`#marks`: the generation tag under which its run sample is held, samples.lua)
    Q.load_config({ 'jobs-history', 'jobs-history-count', 'max-job-history', '#completed-due',
      '#completed-count', queue .. '-max-concurrency', '#marks' })
    return Q.complete(now, h, { jid = jid, worker = worker, queue = queue, data = data,
      token = token, next = nextq, delay = delay, depends = depends })
  end }
end
