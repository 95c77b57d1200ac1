-- put.lua: creating and moving jobs.
--
--@ command put
--@ command requeue throttle job
--@ command put.many throttle job
--
-- Commands (after `now`):
--   put       worker queue jid klass data delay [priority p] [tags JSON] [retries n]
--             [depends JSON] [throttles JSON] [depends-missing error|ignore]
--             [if-absent any|live] [history JSON] [remaining n]    -> jid
--             if-absent any: refused (nothing written) when the jid exists; live: only when
--             it exists and is not complete or failed (a copy between shards, scaling.md)
--             history, remaining (only with if-absent: what a copy carries): history is
--             the job's history as job objects show it, a JSON array of objects with a
--             string `what` and a numeric `when` (other keys: the entry's detail); it
--             becomes the job's history list, then this put's entry. remaining: the
--             retries left, an integer in [0, retries]. Both checked before any write.
--             also the older form without `worker` (read as worker ''; see older_put);
--             worker '' means no worker (a move by a client, not by a worker)
--   requeue   same as put (the job must exist)                     -> jid
--   put.many  worker queue n, then n times: jid klass data delay nopts [key value]*nopts
--             (put's options; all checked before any write)        -> JSON array of jids
--
-- Keys:
--   ql:j:<jid>                 hash  job record (EXISTS, HMGET, HSET, HDEL)
--   ql:j:<jid>-history         list  (RPUSH via Q.history: a moved job; DEL, RPUSH: a copy
--                                    given `history`)
--   ql:j:<jid>-dependencies    set   (SADD, SREM, SMEMBERS, SCARD)
--   ql:j:<jid>-dependents      set   (SADD, SREM)
--   ql:q:<queue>-work|scheduled|depends  zset (ZADD; ZREM via Q.unqueue)
--   ql:queues                  zset  (ZADD NX)
--   ql:w:<worker>:jobs         zset  (ZREM of a moved job's old worker)
--   ql:completed               zset  (ZREM of a re-put complete job)
--   ql:t:<tag>, ql:tags        zset  (ZADD, ZREM, ZINCRBY)
--   ql:r:<jid>                 hash  (EXISTS, recurring-collision check)
--   ql:config                  hash  (HMGET of #marks and lean-job-records; HSET of #marks
--                                    when missing; HGET/HSET of #due:<queue>)
--   channels: ql:log, ql:w:<worker>, ql:put, ql:wake:<queue>


Q.mod.put = function()
  local rcall = Q.rcall
  local C = Q.commands

  -- ---------------------------------------------------------------- put / requeue

  local NO_OPTS = {}  -- (a put without options: read only)
  local NO_TAGS = {}  -- (no tags, or a new job's old ones: read only)

  -- Validate a put and do the reads it needs, writing nothing; returns what apply_put writes
  -- from (as values, not a table: a single put allocates none). `batch` (put.many only)
  -- knows the call's other jobs.
  local function check_put(now, args, must_exist, batch)
    local worker = args[1] == '' and '' or Q.worker(args[1])
    local queue = Q.queue(args[2])
    local jid = Q.jid(args[3])
    if batch and batch.pos[jid] ~= batch.i then
      Q.fail('Arg "jid" invalid: ' .. jid .. ' repeats job ' .. batch.pos[jid] .. ' of this call')
    end
    local klass = Q.klass(args[4])
    local data = Q.data(args[5])
    local delay = args[6] == '0' and 0 or Q.delay(args[6])  -- (the usual delay, parsed)
    local opts = NO_OPTS
    if args[7] ~= nil then
      Q.need('lists,putmove')  -- (options: read in putmove.lua)
      opts = Q.put_pairs(args)
    end
    -- (most puts are of new jobs: an EXISTS costs a fifth of a 13-field HMGET of nothing)
    local key = Q.kjob(jid)
    local old = nil
    if rcall('EXISTS', key) == 1 then
      Q.need('lists,putmove')  -- (a moved job: putmove.lua reads and unlinks it)
      old = Q.read_put(jid)
    end
    if must_exist and not old then Q.fail('Job ' .. jid .. ' does not exist') end
    -- A new job without dependencies needs neither module: most puts build neither (under
    -- EVALSHA every loader a call runs builds its closures again).
    if old or (opts ~= NO_OPTS and opts.depends) then Q.need('throttle,job') end
    -- (a new job's defaults without a call each: most puts are of new jobs; options and a
    -- moved job's values are read in putmove.lua, a module only such a put builds)
    local retries, tags, priority, more = 5, NO_TAGS, 0, nil
    local absent, depends = nil, nil
    if old or opts ~= NO_OPTS then
      Q.need('lists,putmove')
      local listed_tags
      retries, listed_tags, priority, more, absent, depends =
        Q.put_options(jid, opts ~= NO_OPTS and opts or nil, old, batch)
      tags = listed_tags or NO_TAGS
    end
    if not old then
      local parent, n = nil, nil
      if jid:find('-', 2, true) then parent, n = jid:match('^(.+)%-(%d+)$') end
      -- a copy (if-absent) of a child the template has already spawned is no future child
      local spawned = absent and parent
        and tonumber(n) <= (tonumber(rcall('HGET', KP .. 'r:' .. parent, 'count')) or 0)
      if parent and not spawned and rcall('EXISTS', KP .. 'r:' .. parent) == 1 then
        Q.fail('Job ' .. jid .. ' collides with recurring job ' .. parent)
      end
    end
    if batch then batch.note(jid, depends) end
    return worker, queue, jid, key, klass, data, delay, opts, old, retries, tags, priority,
      depends, more
  end
  local OLD = 9  -- (the place of `old` among check_put's values)

  -- Queues known to be listed in ql:queues: K.listed[queue] = the time until which a put
  -- skips its `ZADD ql:queues NX` (at most Q.HORIZON after the put that added it), noted
  -- under the generation tag K.listed_tag (a flush, or another database, drops them all).
  -- Exact for this engine (queue.forget drops them); a queue removed by another writer is
  -- listed again by the first put a second later. In engine memory only (as pop's marks).
  local LISTED_MAX = 256

  local function listed(now, queue, tag)
    local memo = K.listed
    if not memo or K.listed_tag ~= tag then
      memo = {}; K.listed, K.listed_tag, K.nlisted = memo, tag, 0
    end
    local till = memo[queue]
    if till and now < till and till <= now + Q.HORIZON then return true end
    if K.nlisted >= LISTED_MAX then memo = {}; K.listed, K.nlisted = memo, 0 end
    if not till then K.nlisted = K.nlisted + 1 end
    memo[queue] = now + Q.HORIZON  -- (the caller adds it now)
    return false
  end

  -- The config fields a put reads, with one HMGET a call: the generation tag (Q.generation)
  -- and, in the default keyspace, whether new records are lean. (Q.load_config's loop
  -- written out: ~4k instructions a put less.)
  local function put_config()
    local cfgv = ctx.cfgv
    if cfgv and cfgv['#marks'] ~= nil and (KP ~= 'ql:' or cfgv['lean-job-records'] ~= nil) then
      return cfgv
    end
    local shard = KP ~= 'ql:'
    local v = shard and rcall('HMGET', K.config, '#marks')
      or rcall('HMGET', K.config, '#marks', 'lean-job-records')
    local lean = nil  -- (not read in a shard: its records are lean)
    if not shard then lean = v[2] or false end
    if cfgv then
      cfgv['#marks'], cfgv['lean-job-records'] = v[1] or false, lean
    else  -- (the usual case: one constructor, the table sized at once)
      cfgv = { ['#marks'] = v[1] or false, ['lean-job-records'] = lean }
      ctx.cfgv = cfgv
    end
    return cfgv
  end

  -- Whether new records are lean: always in a shard, by the config in the default keyspace
  -- (Q.lean_records from put_config's read: ~2k instructions a put less).
  local function lean_records(cfgv)
    return KP ~= 'ql:' or cfgv['lean-job-records'] == '1'
  end

  -- A job record's fields, for HSET (as values: a plain put passes them on without a table).
  -- A lean record leaves out what readers derive: jid (the key), priority 0, no tags,
  -- remaining = retries.
  local function record(lean, jid, klass, data, priority, tags, state, queue, retries_s, time_s)
    if not lean then
      -- ('{}' is what cjson writes for an empty table: no encoder for the common case)
      return 'jid', jid, 'klass', klass, 'data', data, 'priority', Q.int_arg(priority),
        'tags', #tags > 0 and cjson.encode(tags) or '{}', 'state', state, 'queue', queue,
        'retries', retries_s, 'remaining', retries_s, 'time', time_s
    end
    if priority == 0 and #tags == 0 then
      return 'klass', klass, 'data', data, 'state', state, 'queue', queue, 'retries', retries_s,
        'time', time_s
    end
    local fields = { 'klass', klass, 'data', data, 'state', state, 'queue', queue,
      'retries', retries_s, 'time', time_s }
    if priority ~= 0 then
      table.insert(fields, 'priority'); table.insert(fields, Q.int_arg(priority))
    end
    if #tags > 0 then table.insert(fields, 'tags'); table.insert(fields, cjson.encode(tags)) end
    return unpack(fields)
  end

  -- The log event of a put (Q.ev_put's text without cjson: the jid and queue passed Q.jid /
  -- Q.queue, whose characters JSON never escapes).
  local function put_event(jid, queue)
    return '{"jid":"' .. jid .. '","event":"put","queue":"' .. queue .. '"}'
  end

  -- List the queue in ql:queues (ZADD NX), unless this engine listed it lately.
  local function list_queue(now, queue, cfgv)
    local tag = cfgv['#marks']  -- (Q.generation writes one when there is none: putmove.lua)
    if not tag then Q.need('lists,putmove'); tag = Q.put_generation() end
    if not listed(now, queue, tag) then rcall('ZADD', K.queues, 'NX', Q.time_arg(now), queue) end
  end

  -- Write a put checked by check_put (its values after `now`, `work` and `known`); returns
  -- the jid. put.many passes `work`, the work-set entries it adds with one ZADD, and `known`,
  -- true when an earlier job of the call listed the queue.
  -- `more`: nil, or the throttles, carried history and retries left of Q.put_options.
  local function apply_put(now, work, known, worker, queue, jid, key, klass, data, delay, opts,
      old, retries, tags, priority, depends, more)
    -- All arguments are valid: write from here on.
    local cfgv = put_config()
    local tracked = old and old.tracked == '1'
    -- A moved job's old tags, edges, queue and owner (putmove.lua, loaded by check_put).
    local oldset = NO_TAGS
    if old then oldset = Q.put_unlink(jid, tags, depends, old) end
    rcall(K.pub, K.log, put_event(jid, queue))
    if old then Q.put_moved(now, jid, key, queue, worker, opts, old, more) end
    if #tags > 0 then Q.put_tags(jid, tags, oldset, now) end
    local state = delay > 0 and 'scheduled' or 'waiting'
    local ndeps = 0
    if depends or old then ndeps = Q.put_ndeps(jid, depends, old) end
    local retries_s = retries == 5 and '5' or Q.int_arg(retries)  -- (the default, as text)
    if ndeps > 0 then state = 'depends' end
    local lean = not old and lean_records(cfgv)
    local time_s = Q.ftime(now)
    -- A moved job, the options' extra fields and a dependent's delay add to the record's
    -- fields: a table then. A new job's record goes to HSET as record's values.
    local fields = nil
    if old or more or (ndeps > 0 and delay > 0) then
      fields = { record(lean, jid, klass, data, priority, tags, state, queue, retries_s, time_s) }
      -- A new job's hash leaves out what every reader defaults (no worker, no expiry): a
      -- smaller listpack per waiting job. A moved job overwrites the old values instead.
      if old then
        table.insert(fields, 'worker'); table.insert(fields, '')
        table.insert(fields, 'expires'); table.insert(fields, '0')
      end
      if more then Q.put_more(now, jid, key, queue, fields, more, old) end
      if ndeps > 0 and delay > 0 then
        table.insert(fields, 'scheduled'); table.insert(fields, now + delay)
      end
    end
    if ndeps > 0 then
      rcall('ZADD', Q.kq(queue, 'depends'), now, jid)
    elseif delay > 0 then
      rcall('ZADD', Q.kq(queue, 'scheduled'), now + delay, jid)
      Q.lower_due(queue, now + delay)
    elseif work then  -- put.many: one ZADD for the call (nothing reads -work before it)
      work[#work + 1] = Q.score(priority, now); work[#work + 1] = jid
      Q.wake(queue)
    else
      rcall('ZADD', Q.qn(queue).work, Q.score(priority, now), jid)
      Q.wake(queue)
    end
    if fields then
      rcall('HSET', key, unpack(fields))
    else
      rcall('HSET', key, record(lean, jid, klass, data, priority, tags, state, queue, retries_s,
        time_s))
    end
    if not known then list_queue(now, queue, cfgv) end
    if tracked then Q.publish(K.put, jid) end
    return jid
  end

  local function put(now, args, must_exist)
    return apply_put(now, nil, false, check_put(now, args, must_exist))
  end

  -- ---------------------------------------------------------------- plain puts

  -- Most jobs of a bulk put are plain: a new job under a fresh jid (32 hex digits, as our
  -- client makes them), no delay and no options. A plain put needs only put's checks of klass
  -- and data, and only put's writes for a new waiting job: none of check_put's and
  -- apply_put's handling of options, moves, dependencies and recurring collisions, which was
  -- 30% of a bulk put's Redis instructions. The jobs' arguments are `jid klass data` at
  -- args[jid_at[i]]; `keys` are their records' keys, none of which exists.

  local MANY_STEP = 1e-6  -- job i of a put.many is put at now + (i - 1) * MANY_STEP: FIFO
  local checking = 0  -- (the job check_plain is at: put.many names it in the error)

  local function check_plain(args, jid_at)
    for i = 1, #jid_at do
      checking = i
      local at = jid_at[i]
      Q.klass(args[at + 1])
      Q.data(args[at + 2])
    end
  end

  -- Whether `jid` may be a plain put's: a fresh jid as our client makes them (no recurring
  -- job's child, whose jid has a '-').
  local function plain_jid(jid)
    return #jid == 32 and sfind(jid, '^%x+$') ~= nil
  end

  -- Write checked plain puts into `queue`, job i at now + (i - 1) * MANY_STEP, as apply_put
  -- writes them.
  local function write_plain(now, queue, args, jid_at, keys)
    local cfgv = put_config()
    local lean = lean_records(cfgv)
    local pub, log = K.pub, K.log
    local work = {}
    for i = 1, #jid_at do
      local at = jid_at[i]
      local jid, t = args[at], now + (i - 1) * MANY_STEP
      rcall(pub, log, put_event(jid, queue))
      rcall('HSET', keys[i], record(lean, jid, args[at + 1], args[at + 2], 0, NO_TAGS,
        'waiting', queue, '5', Q.ftime(t)))
      work[2 * i - 1] = Q.score(0, t); work[2 * i] = jid
    end
    rcall('ZADD', Q.qn(queue).work, unpack(work))
    Q.wake(queue)
    list_queue(now, queue, cfgv)
  end

  -- Clients older than the worker argument (qless-py 0.11.4) send
  -- `put queue jid klass data delay [name value]...`. The 6th argument tells the forms
  -- apart: there the current form has data, which must be a JSON object, and the older form
  -- the delay, a number. So only a put whose 6th argument does not start with `{` and whose
  -- 5th (the older form's data) does is read as the older form, with worker ''; any other
  -- put is the current form and gets its errors. Returns the arguments in the current form.
  local function older_put(args)
    local sixth, fifth = args[5], args[4]
    if sixth and (sbyte(sixth, 1) == 123 or sixth:find('^%s*{')) then return args end  -- ('{')
    if not (fifth and fifth:find('^%s*{')) then return args end
    table.insert(args, 1, '')
    return args
  end

  C['put'] = { 'Put', function(now, args) return put(now, older_put(args), false) end }
  C['requeue'] = { 'Requeue', function(now, args) return put(now, args, true) end }

  -- ---------------------------------------------------------------- put.many

  local MANY_MAX = 1000

  -- Raise error `res` of job i of a put.many, its text with `job i: ` after `Put(): `.
  local function job_error(i, res)
    if type(res) ~= 'string' then error(res, 0) end
    local mark = ctx.op .. '(): '
    local at = res:find(mark, 1, true)
    if at then
      local cut = at + #mark - 1
      res = res:sub(1, cut) .. 'job ' .. i .. ': ' .. res:sub(cut + 1)
    end
    error(res, 0)
  end

  -- Run f(...) for job i of a put.many; its error is raised as job_error raises it.
  local function for_job(i, f, ...)
    local ok, res = pcall(f, ...)
    if ok then return res end
    job_error(i, res)
  end

  -- Whether a job exists and is not complete (what Q.add_deps needs to add an edge).
  local function live(jid)
    local state = rcall('HGET', Q.kjob(jid), 'state')
    return state and state ~= 'complete'
  end

  -- The checks a put.many needs beyond put's: the jobs are checked before any is written, so
  -- the edges earlier jobs of the call will have written by a job's turn are kept here.
  local function new_batch(pos)
    local b = { pos = pos, i = 0, edges = {}, dents = {} }
    -- Refuse a dependency on a later job of the call that does not exist yet: put would
    -- silently drop it (it is not there at this job's turn). Then remember this job's edges.
    function b.note(jid, depends)
      if not depends or #depends == 0 then return end
      for _, d in ipairs(depends) do
        local k = pos[d]
        if k and k > b.i and rcall('EXISTS', Q.kjob(d)) == 0 then
          Q.fail('Arg "depends" invalid: ' .. d .. ' is job ' .. k
            .. ' of this call, put after this one')
        end
        b.dents[d] = true
      end
      b.edges[jid] = depends
    end
    -- Q.check_cycle on the graph as it will be at this job's turn: a job put earlier in the
    -- call with a non-empty list has exactly the edges Q.add_deps gives it, others the stored.
    function b.cycle(jid, deps)
      if next(b.edges) == nil then return Q.check_cycle(jid, deps) end
      Q.check_cycle(jid, deps, function(cur)
        local pending = b.edges[cur]
        if not pending then return rcall('SMEMBERS', Q.kdeps(cur)) end
        local out = {}
        for _, d in ipairs(pending) do
          local k = pos[d]
          if (k and k < pos[cur]) or live(d) then out[#out + 1] = d end
        end
        return out
      end, b.dents[jid])
    end
    return b
  end

  -- put.many worker queue n, then n groups: jid klass data delay nopts [key value]*nopts.
  -- Every job is checked (as put checks it) before the first write; job i is then put as put
  -- would at now + (i - 1) * MANY_STEP. Replies a JSON array of the jids.
  C['put.many'] = { 'Put', function(now, args)
    local worker = args[1] == '' and '' or Q.worker(args[1])  -- as put's
    local queue = Q.queue(args[2])
    local n = Q.integer('n', args[3], 1, MANY_MAX)
    -- Where each job's arguments start, and each jid's first position in the call.
    -- `plain`: whether every job is a plain put (write_plain), with a jid of its own.
    local starts, pos, at, plain = {}, {}, 4, true
    for i = 1, n do
      local nopts_text = args[at + 4]
      if nopts_text == nil then
        Q.fail('Arg "n" does not match the arguments: job ' .. i .. ' of ' .. n .. ' is incomplete')
      end
      local nopts = nopts_text == '0' and 0 or for_job(i, Q.integer, 'nopts', nopts_text, 0, 10)
      starts[i] = at
      local jid = args[at]
      if pos[jid] == nil then pos[jid] = i else plain = false end
      if plain and (nopts > 0 or args[at + 3] ~= '0' or not plain_jid(jid)) then plain = false end
      at = at + 5 + 2 * nopts
      if at - 1 > #args then
        Q.fail('Arg "n" does not match the arguments: job ' .. i .. ' of ' .. n .. ' is incomplete')
      end
    end
    if at - 1 ~= #args then
      Q.fail('Arg "n" does not match the arguments: ' .. (#args - at + 1)
        .. ' left over after job ' .. n)
    end
    if plain then
      local keys = {}
      for i = 1, n do keys[i] = Q.kjob(args[starts[i]]) end
      if rcall('EXISTS', unpack(keys)) == 0 then  -- (else some move: put's way, below)
        local ok, err = pcall(check_plain, args, starts)
        if not ok then job_error(checking, err) end
        write_plain(now, queue, args, starts, keys)
        local jids = {}
        for i = 1, n do jids[i] = args[starts[i]] end
        return cjson.encode(jids)
      end
    end
    local batch = new_batch(pos)
    local function checked_values(...) return { check_put(...) } end
    local checked = {}
    for i = 1, n do
      local s = starts[i]
      local a = { worker, queue, args[s], args[s + 1], args[s + 2], args[s + 3] }
      for k = s + 5, (starts[i + 1] or at) - 1 do a[#a + 1] = args[k] end
      batch.i = i
      checked[i] = for_job(i, checked_values, now + (i - 1) * MANY_STEP, a, false, batch)
    end
    local jids, work = {}, {}
    for i = 1, n do
      local v = checked[i]
      -- an earlier job's write may have changed this one (a throttle it released admitted it)
      if v[OLD] then v[OLD] = Q.read_put(v[3]) or v[OLD] end
      -- (i > 1: the first job added the queue to ql:queues, ZADD NX)
      jids[i] = apply_put(now + (i - 1) * MANY_STEP, work, i > 1, unpack(v, 1, 14))
    end
    if #work > 0 then rcall('ZADD', Q.kq(queue, 'work'), unpack(work)) end
    return cjson.encode(jids)
  end }
end
