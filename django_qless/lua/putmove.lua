-- putmove.lua: the parts of a put that only a put with options or of an existing job runs:
-- reading the options, and unlinking a moved job from its old tags, edges, queue and owner;
-- also the generation tag's first write (a put after a flush).
-- A module put.lua loads at that branch (Q.need): under EVALSHA every top-level helper and
-- every loader a call runs is built again by each call, and most puts are of new jobs
-- without options, which build none of this.
--
-- Commands: none (put, requeue and put.many are in put.lua, which calls these).
-- Keys:
--   ql:j:<jid>                 hash  (HMGET of a moved job; EXISTS of a dependency; HDEL of a
--                                    moved job's stale fields)
--   ql:j:<jid>-history         list  (RPUSH via Q.history: a moved job; DEL and RPUSH via
--                                    Q.history_text: a copy given `history`)
--   ql:j:<jid>-dependencies    set   (SMEMBERS, SREM, SCARD)
--   ql:j:<jid>-dependents      set   (SREM)
--   ql:w:<worker>:jobs         zset  (ZREM of a moved job's old worker)
--   ql:completed               zset  (ZREM of a re-put complete job)
--   ql:t:<tag>, ql:tags        zset  (ZADD, ZREM, ZINCRBY)
--   channels: ql:log, ql:w:<worker> (a moved job's lock_lost)

Q.mod.putmove = function()
  local rcall = Q.rcall

  local PUT_FIELDS = { 'state', 'queue', 'worker', 'tags', 'priority', 'retries', 'failure',
    'throttles', 'held', 'grace', 'scheduled', 'history', 'tracked' }

  -- The fields of an existing job a put reads (nil: the job has none of them).
  function Q.read_put(jid) return Q.read(jid, PUT_FIELDS) end

  -- A put's options (after its six arguments), as name -> value.
  function Q.put_pairs(args) return Q.pairs_args(args, 7) end

  -- The keyspace's generation tag when ql:config holds none yet (the first put after a
  -- flush): written here (Q.generation), so a put that finds it builds none of the config
  -- readers.
  function Q.put_generation() return Q.generation() end

  -- The history entries a copy carries (`history` option): the JSON text of a job's
  -- history as job objects show it, an array of objects each with a string `what` and a
  -- numeric `when` (any other key is the entry's detail); returns the entries' list texts.
  local function carried_history(text)
    if not text:find('^%s*%[') then
      Q.fail('Arg "history" must be a JSON array: ' .. text:sub(1, 80))
    end
    local ok, list = pcall(cjson.decode, text)
    if not ok or type(list) ~= 'table' then
      Q.fail('Arg "history" must be a JSON array: ' .. text:sub(1, 80))
    end
    local out = {}
    for i, e in ipairs(list) do
      local what, when = type(e) == 'table' and e.what, type(e) == 'table' and e.when
      if type(what) ~= 'string' or what == '' or type(when) ~= 'number' or when ~= when
          or when == math.huge or when == -math.huge then
        Q.fail('Arg "history" entry ' .. i .. ' must be an object with a string "what" and a'
          .. ' numeric "when"')
      end
      local extra = nil
      for k, v in pairs(e) do
        if k ~= 'what' and k ~= 'when' then extra = extra or {}; extra[k] = v end
      end
      -- (the list form history.lua writes: [when, what] or [when, what, detail])
      out[i] = cjson.encode(extra and { floor(when), what, extra } or { floor(when), what })
    end
    -- (an object, or an array with holes, leaves entries ipairs never reached)
    if next(list) ~= nil and #out == 0 or #out ~= #list then
      Q.fail('Arg "history" must be a JSON array: ' .. text:sub(1, 80))
    end
    return out
  end

  -- A put's values from its options and the job it moves (`opts`: nil when none were given;
  -- `old`: the moved job's fields, or nil): retries, tags (nil: none), priority, `more`,
  -- if-absent and depends, checked as put checks them. `more` is nil or what put.lua's
  -- apply_put passes to Q.put_more: { throttles = JSON text or nil, history = the carried
  -- entries' texts or nil, remaining = n or nil } (one table: a put without either skips
  -- it with the one test it makes anyway).
  function Q.put_options(jid, opts, old, batch)
    local retries, tags, priority, throttles = 5, nil, 0, nil
    local history, remaining = nil, nil
    if old then
      retries, priority = tonumber(old.retries) or 5, tonumber(old.priority) or 0
      throttles = old.throttles
    end
    local absent, depends = nil, nil
    if opts then
      absent = opts['if-absent']
      if absent ~= nil then
        if absent ~= 'any' and absent ~= 'live' then
          Q.fail('Arg "if-absent" must be any or live: ' .. absent:sub(1, 80))
        end
        if old and (absent == 'any' or (old.state ~= 'complete' and old.state ~= 'failed')) then
          Q.fail('Job ' .. jid .. ' already exists (' .. tostring(old.state)
            .. '): if-absent refuses to replace it')
        end
      end
      if opts.retries then retries = Q.integer('retries', opts.retries, 0, 1000) end
      if opts.tags then tags = Q.tags(opts.tags) elseif old then tags = Q.list(old.tags) end
      if opts.priority then priority = Q.priority(opts.priority) end
      depends = opts.depends and Q.depends(opts.depends, jid) or nil
      -- depends-missing: 'ignore' (qless-core's behaviour, the default on the wire) drops a
      -- dependency on a jid that does not exist; 'error' refuses the put (our client's
      -- default).
      local missing = opts['depends-missing']
      if missing ~= nil and missing ~= 'ignore' and missing ~= 'error' then
        Q.fail('Arg "depends-missing" must be error or ignore: ' .. missing:sub(1, 80))
      end
      if missing == 'error' and depends then
        for _, d in ipairs(depends) do
          local earlier = batch and batch.pos[d] and batch.pos[d] < batch.i
          if not earlier and rcall('EXISTS', Q.kjob(d)) == 0 then
            Q.fail('Arg "depends" names no such dependency: ' .. d)
          end
        end
      end
      if opts.throttles then
        local list = Q.throttles(opts.throttles)
        throttles = #list > 0 and cjson.encode(list) or nil
      end
      -- A copy's history and retries left (an extension for copies between shards:
      -- scaling.md); only with if-absent, so a put never rewrites a live job's history.
      if opts.history or opts.remaining then
        if absent == nil then
          Q.fail('Arg "' .. (opts.history and 'history' or 'remaining')
            .. '" needs if-absent (it is for a copy between shards)')
        end
        if opts.history then history = carried_history(opts.history) end
        if opts.remaining then remaining = Q.integer('remaining', opts.remaining, 0, retries) end
      end
    elseif old then
      tags = Q.list(old.tags)
    end
    if old and depends then
      -- (a new job has no dependents, so no cycle: put checks only a moved job)
      if batch then batch.cycle(jid, depends) else Q.check_cycle(jid, depends) end
    end
    local more = nil
    if throttles or history or remaining then
      more = { throttles = throttles, history = history, remaining = remaining }
    end
    return retries, tags, priority, more, absent, depends
  end

  -- Before the put's event: drop a moved job's tags it no longer has (returns the old ones
  -- as a set) and, given a non-empty list, its edges not in `depends`.
  function Q.put_unlink(jid, tags, depends, old)
    -- Tags: only real changes touch the counts.
    local newset = {}
    for _, t in ipairs(tags) do newset[t] = true end
    local oldset = {}
    for _, t in ipairs(Q.list(old.tags)) do
      oldset[t] = true
      if not newset[t] then Q.tag_remove(jid, t) end
    end
    -- Dependencies: a non-empty new list replaces the old edges.
    if depends and #depends > 0 then
      local want = {}
      for _, d in ipairs(depends) do want[d] = true end
      for _, d in ipairs(rcall('SMEMBERS', Q.kdeps(jid))) do
        if not want[d] then
          rcall('SREM', Q.kdents(d), jid)
          rcall('SREM', Q.kdeps(jid), d)
        end
      end
    end
    return oldset
  end

  -- After the put's event: a moved job's history entry, and its old queue, throttles, owner
  -- and stale fields let go of.
  function Q.put_moved(now, jid, key, queue, worker, opts, old, more)
    -- A new job's put entry is implied by `time` + `queue` (history.lua): no history is
    -- written; a moved job's entry goes to the list (after its first visit's, if any).
    -- (a copy carrying its history replaces the old record's in Q.put_more instead)
    if not (more and more.history) then Q.history(jid, now, 'put', { q = queue }, old.history) end
    local throttles = more and more.throttles
    Q.unqueue(jid, old.queue, old.state, old.throttles)
    Q.release(jid, old.held, now)
    if old.worker and old.worker ~= '' then
      rcall('ZREM', Q.kwjobs(old.worker), jid)
      if old.worker ~= worker then Q.lock_lost(jid, old.worker) end
    end
    if old.state == 'complete' then rcall('ZREM', K.completed, jid) end
    if old.state == 'failed' then Q.unfailed(jid, old.failure, old.queue) end
    local stale = {}
    for _, f in ipairs({ 'grace', 'scheduled', 'held' }) do
      if old[f] then table.insert(stale, f) end
    end
    if opts.throttles and not throttles and old.throttles then table.insert(stale, 'throttles') end
    if #stale > 0 then rcall('HDEL', key, unpack(stale)) end
  end

  -- The index of the value of field `name` in a flat HSET list (nil when absent).
  local function field_at(fields, name)
    for i = 1, #fields, 2 do
      if fields[i] == name then return i + 1 end
    end
  end

  -- A put's `more` values (Q.put_options) into `fields`, the job hash's fields so far
  -- (lean or full): throttles and the retries left; and a carried history, which becomes
  -- the job's history list (replacing a replaced record's) followed by this put's entry,
  -- trimmed to max-job-history as any list is.
  function Q.put_more(now, jid, key, queue, fields, more, old)
    if more.throttles then
      table.insert(fields, 'throttles'); table.insert(fields, more.throttles)
    end
    if more.remaining then
      local text = Q.int_arg(more.remaining)
      local at = field_at(fields, 'remaining')
      if at then
        fields[at] = text
      elseif text ~= fields[field_at(fields, 'retries')] then
        -- (a lean record leaves `remaining` out only while it equals `retries`)
        table.insert(fields, 'remaining'); table.insert(fields, text)
      end
    end
    if more.history then
      rcall('DEL', Q.khist(jid))
      if old then rcall('HDEL', key, 'history', 'visit') end
      -- (a copy of the list: Q.history_text appends to it, and put.many keeps its checks)
      local entries = {}
      for i, e in ipairs(more.history) do entries[i] = e end
      -- (the queue passed Q.queue: nothing in it for JSON to escape)
      Q.history_text(jid, '[' .. Q.floor_text(now) .. ',"put",{"q":"' .. queue .. '"}]', nil,
        nil, entries)
    end
  end

  -- The job's tags in the index (`oldset`: those it had, whose counts stay).
  function Q.put_tags(jid, tags, oldset, now)
    for i = 1, #tags do
      local t = tags[i]
      if oldset[t] then rcall('ZADD', KP .. 't:' .. t, now, jid) else Q.tag_add(jid, t, now) end
    end
  end

  -- How many jobs it waits for: the edges added for `depends`, or a moved job's stored ones.
  function Q.put_ndeps(jid, depends, old)
    local ndeps = depends and Q.add_deps(jid, depends) or 0
    if old then ndeps = rcall('SCARD', Q.kdeps(jid)) end
    return ndeps
  end
end
