"""The words the behavior case generators draw from (:mod:`harness.behavior.drafts`).

Changing what a list holds changes what its generator draws: bump that generator's version
(:data:`harness.behavior.generators.GENERATORS`), which reseeds it and changes the suite file.
"""

# --------------------------------------------------------------------------------------------------
# Vocabulary.  Every fact below is meant to be obvious to a child; an entry that could be argued
# (a tomato as a fruit, orange as a fruit or a color, flying fish) is left out on purpose.

NAMES = ("Maria", "Tom", "Anna", "James", "Sofia", "Omar", "Lena", "David", "Mei", "Carlos", "Nina", "Peter",
         "Aisha", "Lucas", "Emma", "Ivan", "Sara", "Hugo", "Yuki", "Daniel", "Elena", "Sam", "Priya", "Leo",
         "Fatima", "Oscar", "Julia", "Ben", "Rosa", "Ali")
CITIES = ("Lisbon", "Paris", "Oslo", "Madrid", "Rome", "Berlin", "Vienna", "Dublin", "Cairo", "Tokyo", "Lima",
          "Prague", "Athens", "Warsaw", "Nairobi", "Seoul", "Bangkok", "Havana", "Quito", "Toronto", "Boston",
          "Chicago", "Seattle", "Denver", "Helsinki", "Budapest", "Munich", "Milan", "Porto", "Istanbul")
CITY_COUNTRY = (("Paris", "France"), ("Lisbon", "Portugal"), ("Tokyo", "Japan"), ("Rome", "Italy"),
                ("Madrid", "Spain"), ("Berlin", "Germany"), ("Cairo", "Egypt"), ("Oslo", "Norway"),
                ("Dublin", "Ireland"), ("Vienna", "Austria"), ("Athens", "Greece"), ("Lima", "Peru"),
                ("Seoul", "Korea"), ("Warsaw", "Poland"), ("Prague", "Czechia"), ("Nairobi", "Kenya"))
JOBS = ("nurse", "teacher", "baker", "pilot", "doctor", "farmer", "chef", "lawyer", "painter", "driver",
        "dentist", "engineer", "plumber", "writer", "singer", "artist", "builder", "gardener", "waiter", "actor")
COLORS = ("red", "blue", "green", "yellow", "purple", "pink", "brown", "black", "white", "gray")
FRUITS = ("apple", "banana", "pear", "grape", "mango", "lemon", "kiwi", "melon", "strawberry", "pineapple",
          "coconut", "papaya", "watermelon", "blueberry")
FRUIT_PLURALS = {"apple": "apples", "banana": "bananas", "pear": "pears", "grape": "grapes", "mango": "mangoes",
                 "lemon": "lemons", "kiwi": "kiwis", "melon": "melons", "strawberry": "strawberries",
                 "pineapple": "pineapples", "coconut": "coconuts", "papaya": "papayas",
                 "watermelon": "watermelons", "blueberry": "blueberries"}
ANIMALS = ("dog", "cat", "horse", "cow", "sheep", "pig", "lion", "tiger", "rabbit", "mouse", "bear", "frog",
           "duck", "goat", "fox", "wolf", "zebra", "monkey", "elephant", "giraffe")
VEHICLES = ("car", "bus", "bicycle", "train", "truck", "tractor", "scooter", "van", "taxi", "motorcycle")
PETS = ("dog", "cat", "rabbit", "parrot", "hamster", "turtle", "goldfish", "pony")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")

# Things and the adjectives that plainly describe them (the first is the most expected one).
TOPICS: dict[str, tuple[str, ...]] = {
    "the sea": ("blue", "deep", "wide", "salty", "calm"),
    "the sun": ("hot", "bright", "yellow", "round", "warm"),
    "snow": ("cold", "white", "soft", "wet", "quiet"),
    "a cat": ("soft", "small", "quiet", "furry", "curious"),
    "a dog": ("loyal", "friendly", "happy", "furry", "playful"),
    "the moon": ("bright", "round", "pale", "distant", "silver"),
    "a forest": ("green", "quiet", "dark", "tall", "wild"),
    "rain": ("wet", "cold", "gray", "heavy", "soft"),
    "summer": ("hot", "sunny", "long", "bright", "warm"),
    "winter": ("cold", "dark", "snowy", "long", "quiet"),
    "a city": ("busy", "loud", "big", "bright", "crowded"),
    "a river": ("long", "wet", "cold", "fast", "blue"),
    "the night": ("dark", "quiet", "cool", "calm", "long"),
    "a garden": ("green", "pretty", "quiet", "sunny", "fresh"),
    "a mountain": ("tall", "rocky", "cold", "steep", "high"),
    "coffee": ("hot", "dark", "bitter", "strong", "fresh"),
    "music": ("loud", "soft", "happy", "sweet", "lively"),
    "a storm": ("loud", "dark", "wild", "wet", "windy"),
    "fire": ("hot", "bright", "red", "warm", "dangerous"),
    "ice": ("cold", "hard", "clear", "slippery", "smooth"),
}

# ---- format: yes/no facts
# (plural animal, verbs it plainly can, verbs it plainly cannot)
ABILITIES = (
    ("birds", ("fly",), ("bark",)),
    ("dogs", ("bark", "swim", "run"), ("fly", "meow")),
    ("cats", ("meow", "climb trees", "run"), ("fly", "bark")),
    ("fish", ("swim",), ("bark", "meow", "climb trees")),
    ("cows", ("moo", "walk"), ("fly", "bark", "climb trees")),
    ("horses", ("run", "gallop"), ("fly", "bark", "meow")),
    ("pigs", ("run", "oink"), ("fly", "bark")),
    ("ducks", ("swim", "fly", "quack"), ("bark", "meow")),
    ("rabbits", ("hop", "run"), ("fly", "bark")),
    ("frogs", ("jump", "swim"), ("bark", "fly")),
    ("bees", ("fly",), ("bark", "meow")),
    ("lions", ("roar", "run"), ("fly", "bark")),
)
# (thing, adjectives that plainly fit it, adjectives that plainly do not)
PROPERTIES = (
    ("the sun", ("hot", "bright"), ("cold", "dark")),
    ("ice", ("cold", "frozen"), ("hot",)),
    ("snow", ("cold", "white"), ("hot", "black")),
    ("fire", ("hot",), ("cold", "wet")),
    ("water", ("wet",), ("dry",)),
    ("sugar", ("sweet",), ("salty", "sour")),
    ("an elephant", ("big", "heavy"), ("small", "tiny")),
    ("a mouse", ("small",), ("big", "huge")),
    ("a feather", ("light", "soft"), ("heavy",)),
    ("a rock", ("hard",), ("soft",)),
    ("coal", ("black",), ("white",)),
    ("grass", ("green",), ("blue", "purple")),
    ("milk", ("white",), ("green", "black")),
    ("a ripe banana", ("yellow",), ("blue",)),
    ("a giraffe", ("tall",), ("short",)),
    ("a snail", ("slow",), ("fast",)),
    ("a cheetah", ("fast",), ("slow",)),
    ("lava", ("hot",), ("cold",)),
    ("a pillow", ("soft",), ("hard",)),
)
KINDS = (("a fruit", FRUITS, True), ("an animal", ANIMALS, True), ("a color", COLORS, False),
         ("a vehicle", VEHICLES, True))   # (kind, members, members take an article)

# ---- format: one-word answers as (question, accepted answers); the first answer is the reference
COLOR_OF = (("snow", ("white",)), ("grass", ("green",)), ("the sky on a clear day", ("blue",)),
            ("coal", ("black",)), ("a ripe banana", ("yellow",)), ("milk", ("white",)),
            ("a ripe tomato", ("red",)), ("a carrot", ("orange",)), ("chocolate", ("brown",)),
            ("a lemon", ("yellow",)), ("blood", ("red",)), ("a strawberry", ("red",)),
            ("a polar bear", ("white",)), ("a crow", ("black",)), ("a lime", ("green",)))
OPPOSITES = (("hot", ("cold",)), ("up", ("down",)), ("big", ("small", "little", "tiny")), ("day", ("night",)),
             ("left", ("right",)), ("open", ("closed", "shut", "close")), ("fast", ("slow",)),
             ("happy", ("sad", "unhappy")), ("wet", ("dry",)), ("full", ("empty",)), ("tall", ("short",)),
             ("top", ("bottom",)), ("black", ("white",)), ("early", ("late",)), ("push", ("pull",)),
             ("in", ("out",)), ("cold", ("hot", "warm")), ("down", ("up",)), ("night", ("day",)),
             ("empty", ("full",)), ("dry", ("wet",)), ("slow", ("fast", "quick")), ("light", ("dark", "heavy")),
             ("hard", ("soft", "easy")), ("old", ("new", "young")), ("first", ("last",)), ("win", ("lose",)))
SOUNDS = (("meow", ("cat", "cats", "kitten")), ("moo", ("cow", "cows")), ("woof", ("dog", "dogs", "puppy")),
          ("oink", ("pig", "pigs")), ("quack", ("duck", "ducks")), ("baa", ("sheep", "lamb")),
          ("neigh", ("horse", "horses", "pony")), ("cluck", ("chicken", "hen", "chickens", "hens")),
          ("roar", ("lion", "lions", "tiger", "tigers")))
PLURALS = (("mouse", ("mice",)), ("child", ("children",)), ("foot", ("feet",)), ("tooth", ("teeth",)),
           ("goose", ("geese",)), ("man", ("men",)), ("woman", ("women",)), ("cat", ("cats",)),
           ("box", ("boxes",)), ("baby", ("babies",)), ("leaf", ("leaves",)), ("knife", ("knives",)))
YOUNG = (("dog", ("puppy", "pup")), ("cat", ("kitten", "kitty")), ("cow", ("calf",)), ("sheep", ("lamb",)),
         ("horse", ("foal", "colt", "filly")), ("duck", ("duckling",)), ("frog", ("tadpole", "froglet")),
         ("bear", ("cub",)), ("lion", ("cub",)), ("goat", ("kid",)), ("pig", ("piglet",)))

# ---- format: number-only answers as (question, answer)
COUNT_FACTS = (
    ("How many legs does a dog have?", 4), ("How many legs does a cat have?", 4),
    ("How many legs does a spider have?", 8), ("How many legs does a bird have?", 2),
    ("How many legs does a chicken have?", 2), ("How many legs does an ant have?", 6),
    ("How many legs does a horse have?", 4), ("How many legs does a cow have?", 4),
    ("How many arms does an octopus have?", 8), ("How many sides does a triangle have?", 3),
    ("How many sides does a square have?", 4), ("How many sides does a hexagon have?", 6),
    ("How many sides does an octagon have?", 8), ("How many sides does a pentagon have?", 5),
    ("How many wheels does a bicycle have?", 2), ("How many wheels does a tricycle have?", 3),
    ("How many wheels does a unicycle have?", 1), ("How many days are in a week?", 7),
    ("How many months are in a year?", 12), ("How many hours are in a day?", 24),
    ("How many minutes are in an hour?", 60), ("How many seconds are in a minute?", 60),
    ("How many eyes does a person have?", 2), ("How many fingers are on one hand?", 5),
)

# ---- stopping: short requests, each with a reply that ends at once
NAME_ONE = (("fruit", "Apple."), ("animal", "Dog."), ("color", "Blue."), ("country", "France."),
            ("city", "Paris."), ("vegetable", "Carrot."), ("sport", "Tennis."), ("musical instrument", "Piano."),
            ("drink", "Water."), ("day of the week", "Monday."), ("month of the year", "May."),
            ("planet", "Mars."), ("flower", "Rose."), ("tree", "Oak."), ("bird", "Robin."), ("tool", "Hammer."),
            ("shape", "Circle."), ("body part", "Hand."), ("vehicle", "Car."), ("season", "Summer."),
            ("insect", "Bee."), ("ocean", "Pacific."))
SAY = (("hello", "Hello!"), ("goodbye", "Goodbye!"), ("good morning", "Good morning!"),
       ("good night", "Good night!"), ("thank you", "Thank you!"), ("happy birthday", "Happy birthday!"),
       ("welcome", "Welcome!"), ("congratulations", "Congratulations!"), ("see you soon", "See you soon!"),
       ("good luck", "Good luck!"))
RHYMES = (("cat", "hat"), ("dog", "log"), ("sun", "fun"), ("day", "play"), ("tree", "bee"), ("cake", "lake"),
          ("ball", "tall"), ("light", "night"), ("book", "cook"), ("rain", "train"), ("star", "car"),
          ("moon", "spoon"), ("bed", "red"), ("hat", "cat"), ("bee", "tree"), ("snow", "glow"), ("king", "ring"),
          ("cold", "gold"), ("fun", "run"), ("top", "hop"), ("pen", "ten"), ("mouse", "house"))
REPLY_WORDS = ("yes", "okay", "done", "ready", "thanks", "sure", "hello", "fine", "great", "agreed", "noted",
               "understood")
DEFINE = (("a tree", "A tall plant with a trunk."), ("a river", "Water that flows to the sea."),
          ("a cup", "A small container for drinks."), ("a book", "Pages with words to read."),
          ("a chair", "A seat for one person."), ("a clock", "A tool that shows the time."),
          ("a bridge", "A way across a river."), ("a key", "A tool that opens a lock."),
          ("a map", "A picture of a place."), ("a lamp", "A thing that gives light."),
          ("bread", "A food baked from flour."), ("a window", "An opening that lets in light."))
PREFIXES = (("", False), ("Please ", True), ("Quick one: ", True), ("Hi! ", False))   # (text, lower the next letter)
SUFFIXES = ("", " Keep it short.", " Be brief.", " Thanks!")

# ---- instruction: tasks with a short answer
TASKS = (("Name one fruit.", "apple"), ("Name an animal.", "dog"), ("Name a color.", "blue"),
         ("Say hello.", "hello"), ("Name a country.", "spain"), ("What color is the sky?", "blue"),
         ("Name a day of the week.", "monday"), ("Name a month.", "june"), ("What do cows drink?", "water"),
         ("Name a planet.", "mars"), ("What animal says meow?", "a cat"), ("Name a vegetable.", "carrot"),
         ("Name a sport.", "soccer"), ("Name a shape.", "circle"), ("Name a flower.", "rose"),
         ("Name a drink.", "tea"), ("What is the opposite of hot?", "cold"), ("Name a season.", "winter"),
         ("Name a bird.", "robin"), ("Name a musical instrument.", "piano"))
UPPER_RULES = ("Reply in uppercase letters only.", "Use only capital letters.", "Write your answer in all caps.")
LOWER_RULES = ("Reply in lowercase letters only.", "Use no capital letters at all.",
               "Write your answer in small letters only.")
START_WORDS = ("Sure", "Okay", "Yes", "Well", "Hello", "Indeed", "Certainly", "Today", "Look", "Answer", "Alright",
               "Listen")
PHRASE_ADJECTIVES = ("little", "green", "happy", "old", "quiet", "brown", "sleepy", "small", "tall", "young")
PHRASE_ANIMALS = ("fox", "cat", "dog", "bird", "frog", "horse", "mouse", "rabbit", "duck", "bear")
PHRASE_VERBS = ("sleeps", "sings", "runs", "waits", "sits", "jumps", "plays", "rests", "hides", "walks")
PHRASE_PLACES = ("under the tree", "by the river", "in the garden", "on the hill", "near the door",
                 "in the snow", "at the park", "behind the house")

# ---- ages in extraction records and JSON requests
AGES = range(18, 80)
