"""Templates written for Tandem's routing classifier (used by make_dataset.py).

Each family is a list of templates; make_dataset.py holds the last one (two for large families)
out of training, so keep the last templates of a family phrased differently from the rest.
Slots ({lang}, {op}, ...) are filled at random from the lists below. Everything here was written
for Tandem; no third-party text.
"""

LANGS = ["Python", "C++", "Rust", "Go", "Java", "TypeScript", "JavaScript", "Kotlin", "SQL", "Bash",
         "Haskell", "C#", "Swift", "Ruby", "Scala", "PHP", "Elixir", "Lua", "R", "Dart", "C",
         "Perl", "Julia", "Clojure", "OCaml", "Zig", "F#", "Objective-C", "PowerShell", "MATLAB"]
TASKS = ["parses an ISO 8601 date", "merges two sorted lists", "detects a cycle in a linked list",
         "implements an LRU cache", "computes the edit distance of two strings",
         "reads a CSV file and groups rows by a column", "retries an HTTP request with backoff",
         "validates an email address", "serializes a tree to JSON", "finds the median of a stream",
         "implements a thread-safe queue", "parses command-line flags",
         "rate-limits calls with a token bucket", "walks a directory recursively",
         "deduplicates records by key", "computes a rolling average",
         "implements binary search over a rotated array", "topologically sorts a dependency graph",
         "streams a large file line by line", "memoizes an expensive function",
         "checks whether a string is a palindrome", "flattens a nested list",
         "counts word frequencies in a text", "converts Roman numerals to integers",
         "finds the shortest path in a weighted graph", "compresses a string with run-length encoding"]
OPS = ["reverse a list", "read a file line by line", "convert a string to an integer",
       "sort a map by its values", "check if a key exists in a dictionary",
       "join a list of strings with a comma", "parse a JSON string", "make an HTTP GET request",
       "iterate over a dictionary", "remove duplicates from an array", "get the current timestamp",
       "format a date as YYYY-MM-DD", "split a string on whitespace", "copy an array",
       "concatenate two lists", "check if a string starts with a prefix", "round a float to 2 decimals",
       "generate a random number in a range", "create a thread", "catch an exception",
       "define an enum", "find the max element of a list", "filter a list", "map over an array",
       "read environment variables", "write to a file", "trim whitespace from a string",
       "convert an int to a string", "check for null", "compare two strings ignoring case",
       "declare a constant", "sleep for one second", "get the length of a string",
       "pad a number with leading zeros", "deep copy an object", "merge two dictionaries",
       "count occurrences in a list", "swap two variables", "create a set", "sum an array",
       "reverse a string", "check if a file exists", "list files in a directory",
       "parse command line arguments", "import a module from another folder",
       "append to a list", "declare a 2D array", "convert a list to a set", "use a regex to match digits"]
PYFNS = ["enumerate", "zip", "list comprehensions", "defaultdict", "f-strings", "with open",
         "sorted with a key", "any and all", "itertools.groupby", "dict.get with a default"]
ERRORS = ["a segmentation fault", "a null pointer exception", "an index out of range error",
          "a deadlock", "a race condition", "a borrow checker error", "a stack overflow",
          "a type error", "a memory leak", "an off-by-one error", "a KeyError", "an undefined symbol"]
SNIPPETS = ["def f(xs):\n    for i in range(len(xs)+1):\n        print(xs[i])",
            "for (int i = 0; i <= n; ++i) { sum += a[i]; }",
            "let v = vec![1, 2, 3];\nlet first = &v[0];\nv.push(4);\nprintln!(\"{}\", first);",
            "SELECT name, COUNT(*) FROM orders GROUP BY customer_id;",
            "func worker(ch chan int) { for { v := <-ch; fmt.Println(v) } }",
            "const total = items.reduce((a, b) => a + b.price);",
            "std::vector<int> v; v.reserve(10); v[3] = 1;",
            "while read line; do echo $line | cut -d, -f2; done < data.csv"]
# (stub name, arguments, docstring) for the hand-written code stubs.
STUBS = [("merge_intervals", "intervals", "Merge overlapping intervals and return them sorted."),
         ("is_balanced", "expr", "Return True if the brackets in expr are balanced."),
         ("top_k_frequent", "words, k", "Return the k most frequent words, ties broken alphabetically."),
         ("parse_duration", "text", "Parse a duration like '1h30m' into seconds."),
         ("rotate_matrix", "matrix", "Rotate a square matrix 90 degrees clockwise in place."),
         ("longest_common_prefix", "strs", "Return the longest common prefix of the strings."),
         ("validate_ipv4", "address", "Check whether address is a valid dotted-quad IPv4 address."),
         ("chunk", "items, size", "Split items into consecutive chunks of at most size elements."),
         ("moving_average", "values, window", "Compute the moving average over a sliding window."),
         ("count_islands", "grid", "Count connected groups of 1s in a 2D grid."),
         ("to_snake_case", "name", "Convert a CamelCase identifier to snake_case."),
         ("kth_smallest", "nums, k", "Return the k-th smallest number without sorting the whole list."),
         ("dedupe_by", "records, key", "Drop records whose key was already seen, keeping the first."),
         ("next_business_day", "day", "Return the next weekday after day, skipping weekends."),
         ("pascal_row", "n", "Return the n-th row of Pascal's triangle."),
         ("word_wrap", "text, width", "Wrap text so that no line is longer than width characters."),
         ("matrix_multiply", "a, b", "Multiply two matrices given as lists of rows."),
         ("find_anagrams", "word, candidates", "Return the candidates that are anagrams of word."),
         ("binary_to_gray", "n", "Convert a binary number to its Gray code."),
         ("sum_of_digits", "n", "Return the sum of the decimal digits of n."),
         ("flatten_dict", "d, sep", "Flatten a nested dictionary, joining keys with sep."),
         ("retry", "fn, attempts, delay", "Call fn until it succeeds, at most attempts times."),
         ("median", "values", "Return the median of a non-empty list of numbers."),
         ("encode_base62", "n", "Encode a non-negative integer in base 62.")]
CONCEPTS = [("quantum entanglement", "physics"), ("CRISPR gene editing", "biology"),
            ("the Byzantine generals problem", "distributed systems"),
            ("monetary policy transmission", "economics"), ("the halting problem", "computer science"),
            ("plate tectonics", "geology"), ("the Treaty of Westphalia", "history"),
            ("Bayesian inference", "statistics"), ("the Krebs cycle", "biochemistry"),
            ("general relativity", "physics"), ("transformer attention", "machine learning"),
            ("the CAP theorem", "databases"), ("Godel's incompleteness theorems", "logic"),
            ("photosynthesis", "biology"), ("the French Revolution", "history"),
            ("public key cryptography", "security"), ("supply and demand elasticity", "economics"),
            ("the immune response to vaccines", "medicine"), ("black hole evaporation", "astrophysics"),
            ("consensus with Raft", "distributed systems"), ("natural selection", "biology"),
            ("the fall of the Roman Empire", "history"), ("inflation", "economics"),
            ("entropy", "thermodynamics"), ("the Higgs boson", "particle physics"),
            ("garbage collection", "programming languages"), ("the Cold War", "history"),
            ("neural plasticity", "neuroscience"), ("compound interest", "finance"),
            ("the greenhouse effect", "climate science"), ("the Industrial Revolution", "history"),
            ("gradient descent", "machine learning"), ("the Pythagorean theorem", "mathematics"),
            ("the placebo effect", "medicine"), ("game theory", "economics"),
            ("DNS resolution", "networking"), ("the Renaissance", "art history"),
            ("antibiotic resistance", "medicine"), ("the P versus NP problem", "computer science"),
            ("continental drift", "geology"), ("the double-slit experiment", "physics")]
PAIRS = [("TCP", "UDP"), ("mitosis", "meiosis"), ("stocks", "bonds"), ("RAM", "ROM"),
         ("a virus", "a bacterium"), ("common law", "civil law"), ("B-trees", "LSM trees"),
         ("classical", "operant conditioning"), ("Keynesian", "monetarist economics"),
         ("optimistic", "pessimistic locking"), ("weather", "climate"), ("DNA", "RNA"),
         ("a process", "a thread"), ("socialism", "communism"), ("nuclear fission", "fusion"),
         ("an index fund", "an ETF"), ("affect", "effect"), ("precision", "recall"),
         ("REST", "GraphQL"), ("a comet", "an asteroid"), ("Baroque", "Classical music"),
         ("an LLC", "a corporation"), ("SQL", "NoSQL databases"), ("speed", "velocity")]
PHENOMENA = ["the sky is blue", "ice floats on water", "airplanes stay in the air",
             "the moon has phases", "bread rises", "leaves change colour in autumn",
             "we dream", "prices rise during a shortage", "the Roman Empire split in two",
             "hash tables have O(1) lookups on average", "the Earth has seasons",
             "some materials are superconductors", "interest rates affect house prices",
             "vaccines need boosters", "stars twinkle", "the ocean is salty"]

TICKETS = ["I was charged twice for my subscription this month", "the app crashes when I open settings",
           "I can't reset my password", "please cancel my order 4412", "the invoice shows the wrong VAT number",
           "my package never arrived", "how do I add a second user to my account",
           "the dashboard is very slow since yesterday", "I want a refund for the last purchase",
           "my card was declined but money left my account"]
DOCS = ["The meeting moved the launch to March because the supplier missed two deadlines; marketing "
        "will prepare a new plan by Friday.",
        "Revenue grew 12% quarter on quarter, driven by enterprise deals, while churn stayed flat at 3%.",
        "The patient reported mild headaches for a week; blood pressure was normal and no medication "
        "was prescribed.",
        "Our team fixed the login outage within 40 minutes; the root cause was an expired certificate.",
        "The city council approved the new bike lanes, with construction starting in the spring.",
        "Alice will handle the customer call, Bob the slides, and the budget review is postponed."]
PEOPLE = ["Maria Gonzalez", "John Smith", "Wei Chen", "Aisha Khan", "Lars Nilsson", "Priya Patel"]
NAMES = ["Sam", "Anna", "Luca", "Mei", "Omar", "Julia", "Tom", "Sofia", "Ravi", "Ella"]
TOOLS = ["search", "calculator", "weather", "calendar", "sql", "email", "browser"]
CITIES = ["Paris", "Berlin", "Tokyo", "Chicago", "Lisbon", "Toronto", "Madrid", "Seoul", "Austin",
          "Oslo", "Rome", "Dublin", "Sydney", "Denver", "Prague"]
PLACES = ["Luigi's", "the Thai place on Main Street", "Blue Door Bistro", "the sushi bar downtown",
          "Casa Verde", "the steakhouse near the office", "Golden Dragon", "the rooftop bar"]
TIMES = ["7pm", "8:30", "noon", "6 pm", "9 am", "half past seven", "19:00", "3pm"]
DAYS = ["tomorrow", "Friday", "next Monday", "Saturday night", "this weekend", "the 14th",
        "Tuesday morning", "tonight"]
EVENTS = ["dentist appointment", "team standup", "1:1 with my manager", "yoga class",
          "call with the bank", "haircut", "lunch with Sarah", "parent-teacher meeting"]
ITEMS = ["milk", "eggs", "paper towels", "oat milk", "coffee beans", "batteries", "dish soap",
         "bananas", "a phone charger", "running shoes", "olive oil", "dog food"]
INGREDIENTS = [("butter", "oil"), ("buttermilk", "regular milk"), ("eggs", "flaxseed"),
               ("sour cream", "greek yogurt"), ("baking soda", "baking powder"),
               ("white sugar", "honey"), ("heavy cream", "coconut milk"), ("shallots", "onions"),
               ("fresh basil", "dried basil"), ("all-purpose flour", "almond flour"),
               ("parmesan", "pecorino"), ("white wine", "chicken stock")]
DISHES = ["pancakes", "brownies", "a carbonara", "banana bread", "a curry", "lasagna", "cookies",
          "a risotto", "mashed potatoes", "muffins"]
THINGS = ["movie", "song", "color", "food", "season", "book", "holiday destination", "board game"]
VEHICLES = ["bus", "train", "ferry", "tram", "shuttle"]
OBJECTS = ["marbles", "stickers", "apples", "pencils", "cookies", "seashells", "balloons", "cards",
           "books", "oranges"]
THEOREMS = ["the square root of 3 is irrational", "there are infinitely many primes",
            "the angles of a triangle sum to 180 degrees", "a tree with n nodes has n - 1 edges",
            "the harmonic series diverges", "every group of prime order is cyclic",
            "the product of two odd numbers is odd", "n^3 - n is divisible by 6",
            "a bounded monotone sequence converges", "there is no largest even number",
            "log 2 is irrational", "the set of real numbers is uncountable"]
FORMULAS = ["the quadratic formula", "the volume of a sphere", "Bayes' theorem",
            "the derivative of sin(x) from first principles", "the sum of a geometric series",
            "the period of a simple pendulum", "the escape velocity of a planet",
            "the formula for compound interest", "the variance of a binomial distribution",
            "the Euler-Lagrange equation", "the ideal gas law from kinetic theory"]
HISTORY = ["the Roman Republic", "the Ottoman Empire", "the printing press", "the Cold War",
           "the Meiji Restoration", "the Silk Road", "the Industrial Revolution",
           "the Hanseatic League", "the Inca Empire", "the Byzantine Empire", "the Reformation",
           "the Mughal Empire", "the Space Race", "the Weimar Republic", "the Tang dynasty"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def fill(template, rng):
    """Fills every slot of `template` at random (one draw per slot, whether used or not)."""
    concept, field = rng.choice(CONCEPTS)
    a, b = rng.choice(PAIRS)
    stub, args, doc = rng.choice(STUBS)
    ing_a, ing_b = rng.choice(INGREDIENTS)
    camel = stub.split("_")[0] + "".join(w.title() for w in stub.split("_")[1:])
    return template.format(
        lang=rng.choice(LANGS), task=rng.choice(TASKS), op=rng.choice(OPS), pyfn=rng.choice(PYFNS),
        error=rng.choice(ERRORS), snippet=rng.choice(SNIPPETS), concept=concept, field=field, a=a,
        b=b, phenomenon=rng.choice(PHENOMENA), n=rng.randint(2, 5000), m=rng.randint(1, 9),
        k=rng.randint(2, 8), ticket=rng.choice(TICKETS), doc=rng.choice(DOCS),
        person=rng.choice(PEOPLE), name=rng.choice(NAMES),
        email="user%d@example.com" % rng.randint(1, 999), tool=rng.choice(TOOLS),
        stub=stub, camel=camel, Camel=camel[:1].upper() + camel[1:], args=args, sdoc=doc,
        city=rng.choice(CITIES), place=rng.choice(PLACES), time=rng.choice(TIMES),
        day=rng.choice(DAYS), event=rng.choice(EVENTS), item=rng.choice(ITEMS), ing_a=ing_a,
        ing_b=ing_b, dish=rng.choice(DISHES), thing=rng.choice(THINGS),
        vehicle=rng.choice(VEHICLES), obj=rng.choice(OBJECTS), wd=rng.choice(WEEKDAYS),
        p=rng.randint(10, 99), q=rng.randint(3, 40), theorem=rng.choice(THEOREMS),
        formula=rng.choice(FORMULAS), history=rng.choice(HISTORY),
        passage=" ".join(rng.sample(DOCS, rng.randint(2, 4))), doc2=rng.choice(DOCS))


ACCURACY = {
    # Short arithmetic word problems, written for Tandem (GSM8K's are longer): small numbers,
    # everyday words (buses, weekdays, shops) that also occur in quick chat requests.
    "math_word": ["{name} had {p} {obj} and gave {q} of them away. How many {obj} does {name} have "
                  "now?",
                  "There were {p} people on the {vehicle}. At the first stop {q} got off and {k} "
                  "got on. How many people are on the {vehicle} now?",
                  "{name} read {p} pages on {wd} and {q} pages the next day. How many more pages "
                  "did {name} read on {wd}?",
                  "A garden is {q} meters wide and {p} meters long. What is its area?",
                  "A shop sells {obj} for {k} dollars each. {name} buys {m} of them and pays with "
                  "a {p} dollar bill. How much change does {name} get?",
                  "{name} saves {q} dollars every week. How many weeks will it take to save {n} "
                  "dollars?",
                  "A {vehicle} travels {n} km in {k} hours. What is its average speed?",
                  "{name} picked some {obj}. After giving {m} to each of {k} friends, {name} had "
                  "{q} left. How many {obj} did {name} pick at first?",
                  "If {k} workers can paint a fence in {m} days, how many days would {q} workers "
                  "need?",
                  "On {wd} the class collected {p} {obj}, and {q} fewer the following day. How "
                  "many {obj} did they collect in total?",
                  "{name} is {k} years older than a cousin who is {q}. How old will {name} be in "
                  "{m} years?"],
    "code_write": ["Write a {lang} function that {task}.",
                   "Implement, in {lang}, code that {task}. Include tests.",
                   "can you write me some {lang} that {task}",
                   "I need a {lang} class that {task}; handle errors properly.",
                   "hey, quick one: how do I write {lang} that {task}?",
                   "Generate a {lang} program that {task} and explain the complexity.",
                   "Please code up something in {lang} which {task}.",
                   "{lang} function which {task}, please",
                   "Write me a small {lang} script that {task}.",
                   "I want to implement something that {task} in {lang}. Can you write it?",
                   "Give me a {lang} implementation that {task}, with comments.",
                   "Need {lang} code: it {task}. Make it efficient.",
                   "Show me how to write {lang} that {task}.",
                   "what would clean {lang} look like for something that {task}?",
                   "Can you show me idiomatic {lang} that {task}?"],
    "code_fix": ["Fix the bug in this {lang} code:\n```\n{snippet}\n```",
                 "Why does this code cause {error}?\n```\n{snippet}\n```",
                 "my {lang} program crashes with {error}, here is the code: {snippet}",
                 "This compiles but gives wrong results, what's wrong?\n{snippet}",
                 "Debug this for me:\n```\n{snippet}\n```\nIt fails with {error}.",
                 "Getting {error} here, any idea?\n{snippet}",
                 "why is this wrong\n{snippet}",
                 "Can you find the bug?\n```\n{snippet}\n```",
                 "This {lang} code throws {error} in production:\n{snippet}\nHow do I fix it?",
                 "Review this {lang} snippet and explain what is wrong:\n{snippet}"],
    "code_design": ["Design a {lang} module that {task}, and explain the trade-offs.",
                    "What architecture would you use for a service that {task} at scale?",
                    "Propose an API in {lang} for a library that {task}.",
                    "How should I structure tests for {lang} code that {task}?",
                    "How would you refactor a {lang} codebase where a function {task} to be testable?"],
    # Short programming how-to questions: short and chatty, but they need a correct answer.
    "code_howto": ["How do you {op} in {lang}?",
                   "how to {op} in {lang}",
                   "What's the idiom for how to {op} in {lang}?",
                   "{lang}: what's the best way to {op}?",
                   "How can I {op} using {lang}?",
                   "In {lang}, how would I {op}?",
                   "what is the {lang} equivalent of Python's {pyfn}?",
                   "Is there a built-in way to {op} in {lang}?",
                   "quick {lang} question - how do I {op}",
                   "What's the cleanest way to {op} with {lang}?",
                   "{lang} how to {op}?",
                   "Whats the syntax to {op} in {lang}",
                   "Is it possible to {op} in {lang} without a library?",
                   "how would you {op} in {lang}, and is there a faster way?"],
    # Bare function stubs with a docstring and no instruction: the caller wants the body.
    "code_stub": ['def {stub}({args}):\n    """{sdoc}"""\n',
                  'def {stub}({args}):\n    """{sdoc}\n\n    Args:\n        {args}\n    """\n    pass\n',
                  "/**\n * {sdoc}\n */\nfunction {camel}({args}) {{\n}}\n",
                  "// {Camel} {sdoc}\nfunc {Camel}({args} int) int {{\n}}\n",
                  "/// {sdoc}\nfn {stub}({args}: &[i64]) -> i64 {{\n    todo!()\n}}\n",
                  "/** {sdoc} */\npublic static int {camel}(int {args}) {{\n    // TODO\n}}\n",
                  "// {sdoc}\nint {Camel}(const std::vector<int>& {args}) {{\n}}\n",
                  "export function {camel}({args}: number[]): number {{\n  // {sdoc}\n}}\n",
                  'def {stub}(self, {args}):\n    """{sdoc}"""\n    raise NotImplementedError\n',
                  "# {sdoc}\ndef {stub}({args})\nend\n",
                  "/**\n * {sdoc}\n * @return the result\n */\nfun {camel}({args}: List<Int>): Int {{\n    TODO()\n}}\n",
                  "async def {stub}({args}) -> None:\n    # {sdoc}\n    ...\n"],
    "knowledge": ["Explain {concept} as it is understood in {field}.",
                  "What are the open research questions about {concept}?",
                  "how does {concept} actually work",
                  "Teach me {concept} like I'm a graduate student in {field}.",
                  "What did the key papers on {concept} show, and what remains disputed?",
                  "Write a detailed essay on {concept} for a {field} journal.",
                  "Give a rigorous explanation of {concept} with references to key results in {field}.",
                  "What is the difference between {a} and {b}? Be precise.",
                  "Why do {phenomenon}?",
                  "Can you explain why {phenomenon}?",
                  "{a} vs {b}: what's the actual difference?",
                  "what is {concept}",
                  "How is {a} different from {b}?",
                  "What causes {concept}, in simple terms but accurately?",
                  "Compare {a} and {b} - when would you use each?",
                  "Explain why {phenomenon}."],
    "reasoning": ["Prove that the sum of the first n odd numbers is n squared.",
                  "Compare {a} and {b} step by step and justify which is better for a bank.",
                  "Derive the expected value of {n} rolls of a fair die and explain why.",
                  "If a train leaves at {m} am going {n} km/h, when does it arrive 300 km away? Show your work.",
                  "Is it possible that {a} outperforms {b}? Reason carefully before answering.",
                  "A bag has {m} red and {n} blue balls. What is the probability of drawing two red ones?",
                  "Analyze the trade-offs between {a} and {b} for a system serving {n} users."],
    # Terse requests for knowledge or reasoning: as short as a command to an assistant, but
    # asking for work that needs the accuracy model.
    "short_task": ["Prove that {theorem}.",
                   "Derive {formula}.",
                   "Solve for x: {m}x + {q} = {p}",
                   "Summarize the history of {history}",
                   "Outline the main causes of the decline of {history}.",
                   "Explain {concept}",
                   "Compare {a} and {b}.",
                   "Why is it true that {theorem}?",
                   "solve {m}x^2 - {q}x + {k} = 0",
                   "What were the long-term consequences of {history}?",
                   "How do I {op} in place?",
                   "derive {formula} step by step",
                   "Walk me through a proof that {theorem}.",
                   "Briefly explain what led to the rise of {history}."],
    "agentic_plan": ["You are an autonomous agent with tools: search, browser, python, file_write. "
                     "Plan and carry out a multi-step task: build a report on {concept} with "
                     "citations and a chart.",
                     "Act as a coding agent. The repository has failing tests in the {lang} module "
                     "that {task}. Investigate, edit the files and make the tests pass.",
                     "Research {concept} using the web tools, then write a summary with sources and "
                     "a list of follow-up experiments.",
                     "You can call {tool} and python. Work out a plan to migrate our {lang} service "
                     "that {task}, execute it, and report what changed.",
                     "Using the available tools, book a trip: compare three flight options, check "
                     "the weather, and write an itinerary for {m} days."],
}

LATENCY = {
    "extraction": ["Extract the person's name and email from: '{person} <{email}> wrote about the "
                   "renewal.' Respond only with JSON.",
                   "Pull the order number and date out of this message: 'Order {n} placed on "
                   "2026-0{m}-1{m}'. Output JSON with keys order_id and date.",
                   "get the phone number from: call {person} at 555-01{m}{m}",
                   "What company is mentioned here? '{person} from Acme signed the deal.' One word.",
                   "Return the amount and currency in '{ticket}, total {n} EUR' as JSON.",
                   "Extract all dates from: {doc}",
                   "Find the names in this text and return them as a list: {doc}",
                   "Which city is mentioned? 'Meeting in {city} on {day}.' Reply with the city only.",
                   "Parse into JSON with keys name and time: '{event} with {name} at {time}'",
                   "pull out the email address: please contact {person} at {email}",
                   "List every number that appears in: '{ticket}, order {n}'",
                   "extract the product from: 'I want to return the {item} I bought {day}'",
                   "Get the sender's name from this signature: 'Best, {person}'",
                   "From the text '{doc}', list the dates and names mentioned as key-value pairs."],
    "summarization": ["Summarize in one sentence: {doc}", "TL;DR: {doc}",
                      "shorten this: {doc}", "Make this a headline: {doc}",
                      "Condense to 10 words: {doc}",
                      "Summarize this email for me: {doc}",
                      "Boil this down to 3 bullet points: {doc}",
                      "Write a short recap of: {doc}",
                      "What's the gist of this? {doc}",
                      "summarise: {doc}",
                      "In one line, what happened here: {doc}",
                      "Give me a one-line summary of this update: {doc}"],
    "classification": ["Classify this support ticket as billing, technical or account: '{ticket}'",
                       "Is the sentiment of this review positive or negative? '{ticket}'",
                       "spam or not spam: '{ticket}'",
                       "Which department should get this: '{ticket}'?",
                       "Tag this message with a topic: '{ticket}'",
                       "Label the intent of: '{ticket}'. Answer with one word.",
                       "Triage: how urgent is this, low, medium or high? '{ticket}'"],
    # Labelling a passage of some length: the instruction before or after the material, as labelling
    # prompts over reviews, articles and sentence pairs come.
    "label_passage": ["Read the text below and say whether its tone is positive or negative.\n{passage}",
                      "{passage}\nWhich category fits this text best: business, health, politics "
                      "or technology?",
                      "Sentence 1: {doc}\nSentence 2: {doc2}\nDo the two sentences say the same "
                      "thing? Yes or no.",
                      "{passage}\nDoes the text above mention a deadline? Answer yes or no.",
                      "Pick one label for this paragraph - news, opinion or announcement:\n{passage}",
                      "Text: {passage}\nQuestion: is the writer satisfied? Options: yes, no.",
                      "{passage}\n\nRate the urgency of this note from 1 to 5. Reply with the number "
                      "only.",
                      "Is the following passage about work or about private life?\n\n{passage}",
                      "Classify the passage as complaint, praise or neutral: {passage}",
                      "{doc} -- {doc2}\nAre these two statements consistent? Answer consistent or "
                      "inconsistent."],
    "agent_step": ["Observation: {tool} returned {n} results.\nThought: which tool next? Answer with "
                   "the tool name only.",
                   "Tool output: {{\"status\": \"ok\", \"rows\": {n}}}\nNext action?",
                   "Action: {tool}\nResult: done\nWhat now? Reply continue or finish.",
                   "Previous step: {tool} failed with timeout. Retry, skip or abort?",
                   "Route this sub-task to one of [{tool}, summarizer, coder]: '{ticket}'",
                   "You are a router inside a multi-agent system. Pick the agent for: '{ticket}'. "
                   "Reply with billing_agent, tech_agent or account_agent.",
                   "Given the tool result '{n} rows', should the agent call {tool} again? yes or no",
                   "Function call returned an error 500. Next step: retry or give up?",
                   "Choose the next tool from [search, {tool}, finish] for: '{ticket}'",
                   "Observation: the page loaded. Thought: extract or navigate? One word.",
                   "Step {m} of the loop: the {tool} call succeeded. Continue or stop?"],
    # Task-oriented chat turns: quick answers or actions, no deep reasoning.
    "chat_booking": ["Book a table for {m} at {place} {day} at {time}.",
                     "can you reserve a room in {city} for {day}",
                     "I need a haircut appointment {day}, anything around {time}?",
                     "Get me two tickets for the {time} showing {day}.",
                     "please cancel my reservation at {place}",
                     "Is there a table free at {place} {day}?",
                     "change my booking at {place} to {m} people",
                     "book me a flight to {city} {day}", "I want to book a massage {day} at {time}",
                     "Any free slots at the gym {day}?", "table for {m} at {time} please",
                     "Reserve a car in {city} from {day}, please."],
    "chat_feedback": ["That was really helpful, thanks!",
                      "thumbs up, exactly what I needed",
                      "Not quite what I asked for, but close.",
                      "I'd rate this answer {m} out of 10.",
                      "The last reply was too long, keep it shorter next time.",
                      "great job {name}, the summary was perfect",
                      "meh, that didn't really help",
                      "Love it! Can you save that for later?"],
    "chat_cooking": ["Can I use {ing_b} instead of {ing_a} in {dish}?",
                     "what can I substitute for {ing_a}",
                     "I'm out of {ing_a}, what else works for {dish}?",
                     "is {ing_b} ok in place of {ing_a}?",
                     "How long do I boil an egg for a runny yolk?",
                     "swap {ing_a} for {ing_b} in {dish}, will it still work?",
                     "What temperature should the oven be for {dish}?",
                     "no {ing_a} at home - replacement for {dish}?"],
    "chat_smalltalk": ["How's your day going?", "tell me a joke", "what's your favourite {thing}?",
                       "I'm bored, say something fun", "do you like {thing}s?",
                       "lol that's funny", "what are you up to, {name}?",
                       "what should I watch tonight?", "do you have a name?",
                       "I just got back from {city}!", "you're funny, {name}",
                       "what's up", "any fun plans for {day}?",
                       "Guess what, I got the job!", "are you a robot?", "I'm so tired today"],
    "chat_greeting": ["hi", "Hello!", "good morning", "hey there {name}", "hiya, you around?",
                      "Good evening!", "yo", "hey, how are you?"],
    "chat_thanks": ["thanks!", "thank you so much", "cheers, {name}", "thx", "Thanks a lot, that's all.",
                    "ok thank you, bye", "much appreciated!", "perfect, thanks again"],
    "chat_schedule": ["Move my {event} to {day} at {time}.",
                      "am I free {day} afternoon?", "put a {event} in my calendar for {day}",
                      "remind me about the {event} {day}", "what's on my schedule {day}?",
                      "cancel the {event} on {day}", "When is my next {event}?",
                      "reschedule my {event} to {day}",
                      "Block {time} to {time} {day} for focus time.",
                      "set an alarm for {time}", "What time is my {event} {day}?",
                      "bump my {event} to {time}", "shift the {event} by 30 minutes",
                      "can you move the {event} an hour later?", "push my {event} to {day}",
                      "I'll be late for the {event}, move it back a bit",
                      "delay my {event} until after lunch",
                      "push the {event} back by an hour"],
    "chat_shopping": ["add {item} to my shopping list", "Do I still need {item}?",
                      "Where can I buy {item} near me?", "Is {item} on sale this week?",
                      "remove {item} from the list", "order more {item}",
                      "what's on my shopping list", "How much is {item} at the corner shop?"],
    # Quick look-ups an assistant answers at once: conversions, timers, tips, time zones.
    "chat_quick": ["convert {m} miles to km", "how many grams in {m} ounces",
                   "set a timer for {m} minutes", "what's a 20% tip on ${n}",
                   "what time is it in {city}?", "flip a coin", "how many cups in a liter",
                   "{m} pounds in kilos?", "what's {n} divided by {m}", "roll a die for me",
                   "is {city} ahead of London?", "how many days until {day}"],
    "chat_weather": ["will it rain in {city} {day}?", "do I need an umbrella today",
                     "What's the temperature in {city} right now?", "is it going to snow {day}",
                     "how windy is it in {city}", "weather for {day} please",
                     "Should I bring a jacket to {city} {day}?", "what's the forecast in {city}"],
}

PREFIXES = ["", "", "", "", "ok ", "hey, ", "so ", "quick question: ", "um, ", "Hi! ", "please, "]
SUFFIXES = ["", "", "", "", " please", " thanks", " :)", "?", "!", " asap", " lol"]


def vary(text, rng):
    """Surface noise applied to every templated example alike (so it carries no label): a
    casual prefix or suffix, and sometimes all lower case."""
    text = rng.choice(PREFIXES) + text + rng.choice(SUFFIXES)
    if rng.random() < 0.25:
        text = text.lower()
    return text
